"""Normalisation: batch/instance/group/layer/RMS norm, local response norm, F.normalize.

Optional affine weight and bias are inputs the generator makes nn.Parameters; which of them
are present follows from the arity. Running statistics are inputs too; they are passed
detached because PyTorch updates them in place in training mode and refuses ones that
require grad.
"""

from __future__ import annotations

import random

import z3

from nnforge.generator.abstract import AbsTensor
from nnforge.generator.spec import OpSpec, Sig, dim_in_range, norm_dim, pick, register_op, same_dtype_combos
from nnforge.generator.specs.nn_arith import (
    FLOATS, MAX_CHANNELS, at_least, bounded, divides_small, fmt_float, more_than_one_element,
)

EPS = (1e-5, 1e-3, 0.1, 1e-12)
MOMENTUM = (0.1, 0.0, 0.5, 1.0)


def _same_float(arity: int) -> list[tuple[str, ...]]:
    return same_dtype_combos(FLOATS, arity)


@register_op
class BatchNorm(OpSpec):
    """F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps).

    Arity 1: no running stats (training only); 3: stats; 4: stats and weight or bias; 5: all.
    Half-precision inputs may carry float32 statistics and affine parameters.
    """

    name = "batch_norm"
    family = "nn"
    weight_inputs = (1, 2, 3, 4)
    vulnerable = True  # a negative running variance gives NaN in eval mode
    in_ranks = ((2, 3, 4, 5), (1,))
    in_dtypes = [c for k in (1, 3, 4, 5) for c in _same_float(k)] + [
        (d,) + ("float32",) * (k - 1) for d in ("float16", "bfloat16") for k in (3, 4, 5)]

    @classmethod
    def pick_arity(cls, rng):
        return rng.choice((1, 3, 4, 5))

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        k = len(in_sigs)
        self.attrs["training"] = True if k == 1 else rng.choice((False, True))
        self.attrs["affine"] = {1: "none", 3: "none", 4: rng.choice(("weight", "bias")), 5: "both"}[k]
        self.choice_attr("momentum", MOMENTUM)
        self.choice_attr("eps", EPS)

    def requires(self, inputs):
        x = inputs[0]
        c = x.shape[1]
        cons = [c >= 1, c <= MAX_CHANNELS] + [p.shape[0] == c for p in inputs[1:]]
        if self.attrs["training"]:
            # batch statistics need more than one value per channel
            cons.append(more_than_one_element([x.shape[0]] + x.shape[2:]))
        return cons

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[0].shape))]

    @classmethod
    def deduct_inputs(cls, out: Sig, rng: random.Random) -> list[Sig] | None:
        if out[0] not in FLOATS or out[1] not in cls.in_ranks[0]:
            return None
        return [out] + [(out[0], 1)] * rng.choice((0, 2, 3, 4))

    def materialize(self, ins, a, in_shapes):
        rm, rv = (f"{ins[1]}.detach()", f"{ins[2]}.detach()") if len(ins) >= 3 else ("None", "None")
        affine = a["affine"]
        w = ins[3] if affine in ("weight", "both") else "None"
        b = {"bias": ins[3] if len(ins) > 3 else "None", "both": ins[4] if len(ins) > 4 else "None"}.get(affine, "None")
        mom = fmt_float(a["momentum"])
        return (f"F.batch_norm({ins[0]}, {rm}, {rv}, weight={w}, bias={b}, training={a['training']}, "
                f"momentum={mom}, eps={fmt_float(a['eps'])})")

    def exports_onnx(self, a, in_sigs):
        return all(s[0] in ("float32", "float16") for s in in_sigs)


@register_op
class InstanceNorm(OpSpec):
    """F.instance_norm(x, running_mean, running_var, weight, bias, use_input_stats, momentum, eps).

    Arity 1: x; 3: x with weight and bias, or with running stats; 5: stats, weight and bias.
    Without input statistics the running stats are required.
    """

    name = "instance_norm"
    family = "nn"
    weight_inputs = (1, 2, 3, 4)
    vulnerable = True
    in_ranks = ((3, 4, 5), (1,))
    in_dtypes = [c for k in (1, 3, 5) for c in _same_float(k)]

    @classmethod
    def pick_arity(cls, rng):
        return rng.choice((1, 3, 5))

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        k = len(in_sigs)
        self.attrs["layout"] = {1: "x", 3: rng.choice(("stats", "affine")), 5: "both"}[k]
        has_stats = self.attrs["layout"] in ("stats", "both")
        self.attrs["use_input_stats"] = rng.choice((False, True)) if has_stats else True
        self.choice_attr("momentum", MOMENTUM)
        self.choice_attr("eps", EPS)

    def requires(self, inputs):
        x = inputs[0]
        c = x.shape[1]
        cons = [c >= 1, c <= MAX_CHANNELS] + [p.shape[0] == c for p in inputs[1:]]
        if self.attrs["use_input_stats"]:
            cons.append(more_than_one_element(x.shape[2:]))
        if self.attrs["layout"] in ("affine", "both"):
            # eager raises on an empty batch when given a weight and bias (IndexError from
            # select(): an eager bug, not the program's; torch 2.13)
            cons.append(x.shape[0] >= 1)
        return cons

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[0].shape))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] not in FLOATS or out[1] not in cls.in_ranks[0]:
            return None
        return [out] + [(out[0], 1)] * rng.choice((0, 2, 4))

    def materialize(self, ins, a, in_shapes):
        layout = a["layout"]
        rm = rv = w = b = "None"
        if layout == "stats" or layout == "both":
            # (updated in place: eager raises on an expanded view, where batch_norm copes)
            rm, rv = f"{ins[1]}.detach().contiguous()", f"{ins[2]}.detach().contiguous()"
        if layout == "affine":
            w, b = ins[1], ins[2]
        if layout == "both":
            w, b = ins[3], ins[4]
        return (f"F.instance_norm({ins[0]}, {rm}, {rv}, weight={w}, bias={b}, "
                f"use_input_stats={a['use_input_stats']}, momentum={fmt_float(a['momentum'])}, eps={fmt_float(a['eps'])})")

    def exports_onnx(self, a, in_sigs):
        return a["use_input_stats"] and in_sigs[0][0] in ("float32", "float16")


class _LastDimsNorm(OpSpec):
    """Normalised over the last k dims: k is the weight's rank when there is one, else an attribute."""

    family = "nn"
    weight_inputs = (1, 2)
    in_ranks = ((1, 2, 3, 4, 5), (1, 2, 3))
    max_arity = 3

    @classmethod
    def pick_arity(cls, rng):
        return rng.randint(1, cls.max_arity)

    @classmethod
    def accepts(cls, in_sigs):
        if not 1 <= len(in_sigs) <= cls.max_arity or not super().accepts(in_sigs):
            return False
        ranks = [s[1] for s in in_sigs]
        return all(1 <= r <= ranks[0] and r == ranks[1] for r in ranks[1:])

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] not in FLOATS or out[1] < 1:
            return None
        k = rng.randint(1, min(out[1], 3))
        return [out] + [(out[0], k)] * rng.randint(0, cls.max_arity - 1)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        x_rank = in_sigs[0][1]
        self.attrs["k"] = in_sigs[1][1] if len(in_sigs) > 1 else rng.randint(1, x_rank)
        if len(in_sigs) == 2:
            self.attrs["affine"] = rng.choice(("weight", "bias")) if self.max_arity == 3 else "weight"
        self.choice_attr("eps", EPS + ((None,) if self.name == "rms_norm" else ()))

    def requires(self, inputs):
        x = inputs[0]
        k = self.attrs["k"]
        tail = x.shape[x.rank - k:]
        return [p.shape[i] == tail[i] for p in inputs[1:] for i in range(k)]

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[0].shape))]

    def _norm_shape(self, a, in_shapes) -> str:
        k = a["k"]
        dims = in_shapes[0][len(in_shapes[0]) - k:]
        return "(" + ", ".join(str(d) for d in dims) + ("," if k == 1 else "") + ")"

    def _affine(self, ins, a) -> tuple[str, str]:
        if len(ins) == 3:
            return ins[1], ins[2]
        if len(ins) == 2:
            return (ins[1], "None") if a["affine"] == "weight" else ("None", ins[1])
        return "None", "None"


@register_op
class LayerNorm(_LastDimsNorm):
    name = "layer_norm"
    in_dtypes = [c for k in (1, 2, 3) for c in _same_float(k)]

    def materialize(self, ins, a, in_shapes):
        w, b = self._affine(ins, a)
        return f"F.layer_norm({ins[0]}, {self._norm_shape(a, in_shapes)}, {w}, {b}, eps={fmt_float(a['eps'])})"

    def exports_onnx(self, a, in_sigs):
        return in_sigs[0][0] in ("float32", "float16", "float64")


@register_op
class RMSNorm(_LastDimsNorm):
    name = "rms_norm"
    max_arity = 2
    in_dtypes = [c for k in (1, 2) for c in _same_float(k)]

    def materialize(self, ins, a, in_shapes):
        w, _ = self._affine(ins, a)
        eps = "None" if a["eps"] is None else fmt_float(a["eps"])
        return f"F.rms_norm({ins[0]}, {self._norm_shape(a, in_shapes)}, {w}, eps={eps})"

    def exports_onnx(self, a, in_sigs):
        return False  # no aten::rms_norm symbolic at opset 17


@register_op
class GroupNorm(OpSpec):
    """F.group_norm(x, num_groups, weight, bias, eps): num_groups divides C; affine optional."""

    name = "group_norm"
    family = "nn"
    weight_inputs = (1, 2)
    vulnerable = False
    in_ranks = ((2, 3, 4, 5), (1,))
    in_dtypes = [c for k in (1, 2, 3) for c in _same_float(k)]

    @classmethod
    def pick_arity(cls, rng):
        return rng.randint(1, 3)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.groups = self.int_attr("num_groups")
        if len(in_sigs) == 2:
            self.choice_attr("affine", ("weight", "bias"))
        self.choice_attr("eps", EPS)

    def requires(self, inputs):
        x = inputs[0]
        c, g = x.shape[1], self.groups
        cons = [g >= 1, g <= MAX_CHANNELS, c >= 1, divides_small(g, c)] + at_least(x.shape[:1])
        # torch needs more than one value per group: C/G > 1 or some spatial dim > 1
        spatial = x.shape[2:]
        cons += [d >= 1 for d in spatial if not isinstance(d, int)]
        cons.append(z3.Or(c > g, *[d >= 2 for d in spatial]) if spatial else c > g)
        return cons + [p.shape[0] == c for p in inputs[1:]]

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[0].shape))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] not in FLOATS or out[1] not in cls.in_ranks[0]:
            return None
        return [out] + [(out[0], 1)] * rng.randint(0, 2)

    def materialize(self, ins, a, in_shapes):
        w = b = "None"
        if len(ins) == 3:
            w, b = ins[1], ins[2]
        elif len(ins) == 2:
            w, b = (ins[1], "None") if a["affine"] == "weight" else ("None", ins[1])
        return f"F.group_norm({ins[0]}, {a['num_groups']}, {w}, {b}, eps={fmt_float(a['eps'])})"

    def exports_onnx(self, a, in_sigs):
        return in_sigs[0][0] in ("float32", "float16")


@register_op
class LocalResponseNorm(OpSpec):
    """F.local_response_norm(x, size, alpha, beta, k) across channels (dim 1)."""

    name = "local_response_norm"
    family = "nn"
    in_ranks = ((3, 4, 5),)
    in_dtypes = _same_float(1)

    @classmethod
    def accepts(cls, in_sigs):
        # rank > 3 goes through avg_pool3d, which has no float16/bfloat16 CPU kernel
        return super().accepts(in_sigs) and (in_sigs[0][1] == 3 or in_sigs[0][0] in ("float32", "float64"))

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out] if cls.accepts([out]) else None

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.size = self.int_attr("size")
        self.choice_attr("alpha", (1e-4, 1e-2, 1.0))
        self.choice_attr("beta", (0.75, 0.5, 1.0))
        self.choice_attr("k", (1.0, 2.0, 0.5))

    def requires(self, inputs):
        x = inputs[0]
        return bounded([self.size], 1, 2 * MAX_CHANNELS) + at_least(x.shape[1:])

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[0].shape))]

    def materialize(self, ins, a, in_shapes):
        # eager's local_response_norm calls .view internally and raises on some non-contiguous
        # inputs (e.g. after a transpose), so the generated call feeds it a contiguous tensor
        return (f"F.local_response_norm({ins[0]}.contiguous(), {a['size']}, alpha={fmt_float(a['alpha'])}, "
                f"beta={fmt_float(a['beta'])}, k={fmt_float(a['k'])})")

    def exports_onnx(self, a, in_sigs):
        return in_sigs[0][0] in ("float32", "float16")  # exported through AveragePool


@register_op
class Normalize(OpSpec):
    """F.normalize(x, p, dim, eps): x / max(||x||_p along dim, eps)."""

    name = "normalize"
    family = "nn"
    in_ranks = ((1, 2, 3, 4, 5),)
    in_dtypes = _same_float(1)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.dim = self.int_attr("dim")
        self.choice_attr("p", (2.0, 1.0, 3.0, 0.5, float("inf"), 0.0))
        self.choice_attr("eps", EPS)

    def requires(self, inputs):
        cons = [dim_in_range(self.dim, inputs[0].rank)]
        if self.attrs["p"] == float("inf") and inputs[0].rank > 0:
            # the inf norm is a max: it has no value on an empty dim, and eager raises there
            cons.append(pick(inputs[0].shape, norm_dim(self.dim, inputs[0].rank)) >= 1)
        return cons

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[0].shape))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out] if out[0] in FLOATS and out[1] in cls.in_ranks[0] else None

    def materialize(self, ins, a, in_shapes):
        return f"F.normalize({ins[0]}, p={fmt_float(a['p'])}, dim={a['dim']}, eps={fmt_float(a['eps'])})"

    def exports_onnx(self, a, in_sigs):
        # The exporter lowers only p=1 and p=2 norms (ReduceL1/ReduceL2).
        return a["p"] in (1.0, 2.0) and in_sigs[0][0] in ("float32", "float16", "float64")

"""Other nn functionals: softmax/log_softmax, scaled_dot_product_attention, embedding,
dropout in eval mode, glu, cosine_similarity, pairwise_distance.
"""

from __future__ import annotations


import z3

from nnforge.core.dtypes import ALL_DTYPES, INT_DTYPES
from nnforge.generator.abstract import AbsTensor
from nnforge.generator.spec import (
    OpSpec, broadcast, broadcast_all, dim_in_range, norm_dim, pick, register_op, same_dtype_combos,
)
from nnforge.generator.specs.nn_arith import SMALL, FLOATS, divides_small, fmt_float


class _Softmax(OpSpec):
    """dim (negative too) and an optional dtype the input is cast to first."""

    family = "nn"
    fn = ""
    in_dtypes = same_dtype_combos(FLOATS + INT_DTYPES, 1)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.dim = self.int_attr("dim")
        floats_only = in_sigs[0][0] not in FLOATS  # integer inputs need the dtype argument
        self.choice_attr("dtype", FLOATS if floats_only else (None,) * 4 + FLOATS)

    def requires(self, inputs):
        return [dim_in_range(self.dim, inputs[0].rank)]

    def type_transfer(self, inputs):
        x = inputs[0]
        return [AbsTensor(self.attrs["dtype"] or x.dtype, list(x.shape))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out] if out[0] in FLOATS else None

    def materialize(self, ins, a, in_shapes):
        dt = "None" if a["dtype"] is None else f"torch.{a['dtype']}"
        return f"{self.fn}({ins[0]}, dim={a['dim']}, dtype={dt})"

    def exports_onnx(self, a, in_sigs):
        # With an integer input the exporter drops the dtype cast and writes an invalid model.
        return in_sigs[0][0] in ("float32", "float64", "float16") and (a["dtype"] or "float32") != "bfloat16"


@register_op
class Softmax(_Softmax):
    name = "softmax"
    fn = "F.softmax"


@register_op
class LogSoftmax(_Softmax):
    name = "log_softmax"
    fn = "F.log_softmax"


@register_op
class ScaledDotProductAttention(OpSpec):
    """q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev); batch dims broadcast.

    An optional mask (bool, or of the query dtype) broadcasts to (..., L, S); is_causal
    only without a mask; enable_gqa lets k/v have fewer heads (dim -3) dividing q's.
    """

    name = "scaled_dot_product_attention"
    family = "nn"
    # With an empty query or key the eager kernel returns q's batch dims without broadcasting.
    zero_size_ok = False
    vulnerable = True  # a bool mask row with no True gives NaN
    in_ranks = ((2, 3, 4),)
    in_dtypes = same_dtype_combos(FLOATS, 3) + [(d, d, d, m) for d in FLOATS for m in (d, "bool")]

    @classmethod
    def pick_arity(cls, rng):
        return rng.choice((3, 4))

    @classmethod
    def accepts(cls, in_sigs):
        if not super().accepts(in_sigs):
            return False
        # the mask is added in place to q @ k^T, so it may not have more dims than q and k give it
        if len(in_sigs) == 4 and in_sigs[3][1] > max(s[1] for s in in_sigs[:2]):
            return False
        return True

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] not in FLOATS or out[1] not in (2, 3, 4):
            return None
        sigs = [out, (out[0], out[1]), (out[0], out[1])]
        if rng.random() < 0.4:
            sigs.append((rng.choice((out[0], "bool")), rng.randint(1, out[1])))
        return sigs

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.attrs["is_causal"] = len(in_sigs) == 3 and rng.random() < 0.4
        self.choice_attr("scale", (None, None, 0.5, 1.0, 0.125))
        ranks = [s[1] for s in in_sigs[:3]]
        self.attrs["enable_gqa"] = min(ranks) >= 3 and rng.random() < 0.3

    def _shapes(self, inputs):
        q, k, v = (t.shape for t in inputs[:3])
        cons = [q[-1] == k[-1], k[-2] == v[-2]]
        if self.attrs["enable_gqa"]:
            # heads (dim -3): q's a multiple of k's, k and v equal; the rest broadcasts
            cons += [k[-3] == v[-3], k[-3] >= 1, k[-3] <= SMALL, divides_small(k[-3], q[-3])]
            c2, batch = broadcast_all([q[:-3], k[:-3], v[:-3]])
            batch = batch + [q[-3]]
        else:
            c2, batch = broadcast_all([q[:-2], k[:-2], v[:-2]])
        cons += c2
        if len(inputs) == 4:
            # the mask broadcasts into the attention weights, whose batch dims come from q and k only
            if self.attrs["enable_gqa"]:
                c_qk, attn_batch = broadcast_all([q[:-3], k[:-3]])
                attn_batch = attn_batch + [q[-3]]
            else:
                c_qk, attn_batch = broadcast_all([q[:-2], k[:-2]])
            attn = attn_batch + [q[-2], k[-2]]
            c3, full = broadcast(inputs[3].shape, attn)
            cons += c_qk + c3 + [a == b for a, b in zip(full, attn)]
        return cons, batch + [q[-2], v[-1]]

    def requires(self, inputs):
        return self._shapes(inputs)[0]

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, self._shapes(inputs)[1])]

    def materialize(self, ins, a, in_shapes):
        mask = ins[3] if len(ins) == 4 else "None"
        scale = "None" if a["scale"] is None else fmt_float(a["scale"])
        return (f"F.scaled_dot_product_attention({ins[0]}, {ins[1]}, {ins[2]}, attn_mask={mask}, dropout_p=0.0, "
                f"is_causal={a['is_causal']}, scale={scale}, enable_gqa={a['enable_gqa']})")

    def exports_onnx(self, a, in_sigs):
        # the exporter takes a bool or float32 mask only, and has no enable_gqa
        mask_ok = len(in_sigs) == 3 or in_sigs[3][0] in ("bool", "float32")
        return not a["enable_gqa"] and mask_ok and in_sigs[0][0] in ("float32", "float64")


@register_op
class Embedding(OpSpec):
    """F.embedding(idx % num_embeddings, weight): the index is made in range inside the program."""

    name = "embedding"
    family = "nn"
    arity = 2
    weight_inputs = (1,)
    in_ranks = ((0, 1, 2, 3), (2,))
    in_dtypes = [(i, f) for i in INT_DTYPES for f in FLOATS]

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.attrs["padding_idx"] = rng.choice((None, None, 0, -1))

    def requires(self, inputs):
        return [inputs[1].shape[0] >= 1]

    def type_transfer(self, inputs):
        idx, w = inputs
        return [AbsTensor(w.dtype, list(idx.shape) + [w.shape[1]])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] not in FLOATS or out[1] < 1 or out[1] > 4:
            return None
        return [(rng.choice(INT_DTYPES), out[1] - 1), (out[0], 2)]

    def materialize(self, ins, a, in_shapes):
        n = in_shapes[1][0]
        return (f"F.embedding(torch.remainder({ins[0]}.to(torch.int64), {n}), {ins[1]}, "
                f"padding_idx={a['padding_idx']})")

    def exports_onnx(self, a, in_sigs):
        return in_sigs[1][0] in ("float32", "float64", "float16")


@register_op
class DropoutEval(OpSpec):
    """Dropout variants with training=False: the identity, which compilers must see through."""

    name = "dropout"
    family = "nn"
    in_dtypes = same_dtype_combos(ALL_DTYPES, 1)
    VARIANTS = {"dropout": range(0, 6), "alpha_dropout": range(0, 6), "feature_alpha_dropout": range(0, 6),
                "dropout1d": (2, 3), "dropout2d": (3, 4), "dropout3d": (4, 5)}

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        dtype, rank = in_sigs[0]
        fns = [f for f, ranks in self.VARIANTS.items() if rank in ranks and (f == "dropout" or dtype in FLOATS)]
        self.choice_attr("fn", fns)
        self.choice_attr("p", (0.0, 0.5, 1.0))

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[0].shape))]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out]

    def materialize(self, ins, a, in_shapes):
        return f"F.{a['fn']}({ins[0]}, p={fmt_float(a['p'])}, training=False)"


@register_op
class Glu(OpSpec):
    """a * sigmoid(b) for the two halves of `dim`, whose size must be even."""

    name = "glu"
    family = "nn"
    in_ranks = ((1, 2, 3, 4, 5),)
    in_dtypes = same_dtype_combos(FLOATS, 1)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.dim = self.int_attr("dim")

    def requires(self, inputs):
        x = inputs[0]
        d = norm_dim(self.dim, x.rank)
        return [dim_in_range(self.dim, x.rank), pick(x.shape, d) % 2 == 0]

    def type_transfer(self, inputs):
        x = inputs[0]
        d = norm_dim(self.dim, x.rank)
        # (a literal dim halves as a z3 Int: 1 / 2 in Python is 0.5, which made the shape Real)
        halves = [z3.IntVal(s) / 2 if isinstance(s, int) else s / 2 for s in x.shape]
        return [AbsTensor(x.dtype, [z3.If(d == i, h, s) for i, (h, s) in enumerate(zip(halves, x.shape))])]

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out] if cls.accepts([out]) else None

    def materialize(self, ins, a, in_shapes):
        return f"F.glu({ins[0]}, dim={a['dim']})"

    def exports_onnx(self, a, in_sigs):
        return in_sigs[0][0] != "bfloat16"  # ONNX Runtime has no bfloat16 Sigmoid


@register_op
class CosineSimilarity(OpSpec):
    """Reduces `dim` of the broadcast shape of x1 and x2."""

    name = "cosine_similarity"
    family = "nn"
    arity = 2
    in_ranks = ((1, 2, 3, 4),)
    in_dtypes = same_dtype_combos(FLOATS, 2)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.dim = self.int_attr("dim")
        self.choice_attr("eps", (1e-8, 1e-3, 0.5))

    def _out_rank(self) -> int:
        return max(s[1] for s in self.in_sigs)

    def requires(self, inputs):
        cons, _ = broadcast(inputs[0].shape, inputs[1].shape)
        return cons + [dim_in_range(self.dim, self._out_rank())]

    def type_transfer(self, inputs):
        _, shape = broadcast(inputs[0].shape, inputs[1].shape)
        d = norm_dim(self.dim, len(shape))
        # drop entry d: entry i of the result is shape[i] below d and shape[i + 1] from d on
        out = [z3.If(d <= i, shape[i + 1], shape[i]) for i in range(len(shape) - 1)]
        return [AbsTensor(inputs[0].dtype, out)]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] not in FLOATS or out[1] + 1 > 4:
            return None
        r = out[1] + 1
        return [(out[0], r), (out[0], rng.randint(1, r))]

    def materialize(self, ins, a, in_shapes):
        return f"F.cosine_similarity({ins[0]}, {ins[1]}, dim={a['dim']}, eps={fmt_float(a['eps'])})"

    def exports_onnx(self, a, in_sigs):
        # inputs of different ranks make the exporter lose the scalar type
        return in_sigs[0][1] == in_sigs[1][1] and in_sigs[0][0] in ("float32", "float64")


@register_op
class PairwiseDistance(OpSpec):
    """||x1 - x2 + eps||_p over the last dim of the broadcast shape; keepdim keeps it as 1."""

    name = "pairwise_distance"
    family = "nn"
    arity = 2
    in_ranks = ((1, 2, 3),)
    in_dtypes = same_dtype_combos(FLOATS, 2)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.choice_attr("p", (2.0, 1.0, 3.0, float("inf"), 0.5))
        self.choice_attr("eps", (1e-6, 0.0, 0.1))
        self.bool_attr("keepdim")

    def requires(self, inputs):
        cons, shape = broadcast(inputs[0].shape, inputs[1].shape)
        if self.attrs["p"] == float("inf") and shape:  # a max over no elements has no value: it raises
            cons = list(cons) + [shape[-1] >= 1]
        return cons

    def type_transfer(self, inputs):
        _, shape = broadcast(inputs[0].shape, inputs[1].shape)
        out = list(shape[:-1]) + ([1] if self.attrs["keepdim"] else [])
        return [AbsTensor(inputs[0].dtype, out)]

    @classmethod
    def deduct_inputs(cls, out, rng):
        if out[0] not in FLOATS:
            return None
        r = out[1] if rng.random() < 0.5 and out[1] >= 1 else out[1] + 1
        if not 1 <= r <= 3:
            return None
        return [(out[0], r), (out[0], rng.randint(1, r))]

    def materialize(self, ins, a, in_shapes):
        return (f"F.pairwise_distance({ins[0]}, {ins[1]}, p={fmt_float(a['p'])}, eps={fmt_float(a['eps'])}, "
                f"keepdim={a['keepdim']})")

    def exports_onnx(self, a, in_sigs):
        return a["p"] in (1.0, 2.0) and in_sigs[0][0] in ("float32", "float64")

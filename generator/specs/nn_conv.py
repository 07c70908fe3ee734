"""Convolutions: conv1d/2d/3d and conv_transpose1d/2d/3d, batched and unbatched.

Weights and bias are inputs (positions 1 and 2) that the generator makes nn.Parameters. Every
integer argument may be written as one int or as a per-dim tuple; conv padding may also be
"same" (stride 1 only, which PyTorch enforces) or "valid".
"""

from __future__ import annotations

import random
from typing import ClassVar

import z3

from nnforge.generator.abstract import AbsTensor
from nnforge.generator.spec import OpSpec, Sig, register_op, same_dtype_combos
from nnforge.generator.specs.nn_arith import (
    FLOATS, MAX_CHANNELS, MAX_DILATION, MAX_KERNEL, MAX_PADDING, MAX_STRIDE, at_least, bounded, divides_small,
    mul_small, named_dims, spatial_arg,
    spatial_ints, spatial_values, transposed_out, window_out,
)

# ONNX has no bfloat16 Conv and ONNX Runtime's CPU Conv has no float64 kernel.
ONNX_CONV_DTYPES = ("float32", "float16")


class _ConvBase(OpSpec):
    """Shared typing of conv and transposed conv: x (N?, C, *spatial), weight, optional bias."""

    n: ClassVar[int] = 2
    family = "nn"
    weight_inputs = (1, 2)
    in_dtypes = same_dtype_combos(FLOATS, 2) + same_dtype_combos(FLOATS, 3)

    @classmethod
    def pick_arity(cls, rng: random.Random) -> int:
        return rng.choice((2, 3))

    @classmethod
    def accepts(cls, in_sigs) -> bool:
        if len(in_sigs) not in (2, 3) or not super().accepts(in_sigs):
            return False
        ranks = [s[1] for s in in_sigs]
        return ranks[0] in (cls.n + 1, cls.n + 2) and ranks[1] == cls.n + 2 and (len(ranks) == 2 or ranks[2] == 1)

    @classmethod
    def ranks_at(cls, i: int):
        return ((cls.n + 1, cls.n + 2), (cls.n + 2,), (1,))[i]

    @classmethod
    def deduct_inputs(cls, out: Sig, rng: random.Random) -> list[Sig] | None:
        if out[0] not in FLOATS or out[1] not in (cls.n + 1, cls.n + 2):
            return None
        sigs = [out, (out[0], cls.n + 2)]
        return sigs + [(out[0], 1)] if rng.random() < 0.5 else sigs

    def _split(self, x: AbsTensor):
        n = self.n
        return x.shape[: x.rank - n - 1], x.shape[x.rank - n - 1], x.shape[x.rank - n:]

    def _int_forms(self) -> None:
        n = self.n
        form = lambda: self.rng.choice(("int", "tuple"))  # noqa: E731
        self.dilation = spatial_ints(self, "dilation", n, form())
        self.groups = self.int_attr("groups")


@register_op
class Conv2d(_ConvBase):
    name = "conv2d"
    n = 2

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        n = self.n
        mode = self.choice_attr("padding_mode", ("int", "tuple", "same", "valid"))
        self.stride = [1] * n if mode == "same" else spatial_ints(self, "stride", n, rng.choice(("int", "tuple")))
        self.padding = spatial_ints(self, "padding", n, mode) if mode in ("int", "tuple") else None
        self._int_forms()

    def requires(self, inputs):
        x, w = inputs[0], inputs[1]
        _, c, spatial = self._split(x)
        k = w.shape[2:]
        cout, cin_g = w.shape[0], w.shape[1]
        g = self.groups
        cons = [g >= 1, g <= MAX_CHANNELS, mul_small(cin_g, g) == c, divides_small(g, cout), cout >= 1,
                cout <= MAX_CHANNELS, c <= MAX_CHANNELS]
        cons += bounded(k, 1, MAX_KERNEL) + bounded(self.stride, 1, MAX_STRIDE) + bounded(self.dilation, 1, MAX_DILATION)
        cons += at_least(spatial)
        if self.padding is not None:
            cons += bounded(self.padding, 0, MAX_PADDING)
        if len(inputs) == 3:
            cons.append(inputs[2].shape[0] == cout)
        named, outs = named_dims(self, self._out_exprs(inputs))
        return cons + named + [o >= 1 for o in outs]

    def _out_spatial(self, spatial, k, pads):
        return [window_out(spatial[i], k[i], self.stride[i], pads[i], self.dilation[i]) for i in range(self.n)]

    def _out_exprs(self, inputs):
        x, w = inputs[0], inputs[1]
        _, _, spatial = self._split(x)
        if self.attrs["padding_mode"] == "same":
            return list(spatial)
        return self._out_spatial(spatial, w.shape[2:], self.padding or [0] * self.n)

    def type_transfer(self, inputs):
        x, w = inputs[0], inputs[1]
        batch, _, _ = self._split(x)
        out = named_dims(self, self._out_exprs(inputs))[1]
        return [AbsTensor(x.dtype, list(batch) + [w.shape[0]] + out)]

    def materialize(self, ins, a, in_shapes):
        n = self.n
        mode = a["padding_mode"]
        pad = repr(mode) if mode in ("same", "valid") else spatial_arg(a, "padding", n)
        stride = "1" if mode == "same" else spatial_arg(a, "stride", n)
        bias = ins[2] if len(ins) == 3 else "None"
        return (f"F.conv{n}d({ins[0]}, {ins[1]}, {bias}, stride={stride}, padding={pad}, "
                f"dilation={spatial_arg(a, 'dilation', n)}, groups={a['groups']})")

    def exports_onnx(self, a, in_sigs):
        # padding="same" exports as auto_pad=SAME_UPPER, which ONNX Runtime rejects with dilation.
        if a["padding_mode"] == "same" and any(d != 1 for d in spatial_values(a, "dilation", self.n)):
            return False
        return in_sigs[0][0] in ONNX_CONV_DTYPES


@register_op
class Conv1d(Conv2d):
    name = "conv1d"
    n = 1


@register_op
class Conv3d(Conv2d):
    name = "conv3d"
    n = 3


@register_op
class ConvTranspose2d(_ConvBase):
    """Weight is (C_in, C_out / groups, *k); output_padding must be below stride or dilation."""

    name = "conv_transpose2d"
    n = 2

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        n = self.n
        self.stride = spatial_ints(self, "stride", n, rng.choice(("int", "tuple")))
        self.padding = spatial_ints(self, "padding", n, rng.choice(("int", "tuple")))
        self.output_padding = spatial_ints(self, "output_padding", n, rng.choice(("int", "tuple")))
        self._int_forms()

    def _out_spatial(self, spatial, k):
        return [transposed_out(spatial[i], k[i], self.stride[i], self.padding[i], self.dilation[i],
                               self.output_padding[i]) for i in range(self.n)]

    def requires(self, inputs):
        x, w = inputs[0], inputs[1]
        _, c, spatial = self._split(x)
        k = w.shape[2:]
        g = self.groups
        cons = [g >= 1, g <= MAX_CHANNELS, w.shape[0] == c, divides_small(g, c), c >= 1, c <= MAX_CHANNELS,
                w.shape[1] >= 1, mul_small(w.shape[1], g) <= MAX_CHANNELS]
        cons += bounded(k, 1, MAX_KERNEL) + bounded(self.stride, 1, MAX_STRIDE) + bounded(self.dilation, 1, MAX_DILATION)
        # padding only trims the output here, and is what keeps a growing output under the size cap
        cons += bounded(self.padding, 0, 3 * MAX_PADDING) + at_least(spatial)
        cons += [z3.And(op >= 0, z3.Or(op < s, op < d))
                 for op, s, d in zip(self.output_padding, self.stride, self.dilation)]
        if len(inputs) == 3:
            cons.append(inputs[2].shape[0] == mul_small(w.shape[1], g))
        named, outs = named_dims(self, [mul_small(w.shape[1], g)] + self._out_spatial(spatial, k))
        return cons + named + [o >= 1 for o in outs]

    def type_transfer(self, inputs):
        x, w = inputs[0], inputs[1]
        batch, _, spatial = self._split(x)
        outs = named_dims(self, [mul_small(w.shape[1], self.groups)] + self._out_spatial(spatial, w.shape[2:]))[1]
        return [AbsTensor(x.dtype, list(batch) + outs)]

    def materialize(self, ins, a, in_shapes):
        n = self.n
        bias = ins[2] if len(ins) == 3 else "None"
        return (f"F.conv_transpose{n}d({ins[0]}, {ins[1]}, {bias}, stride={spatial_arg(a, 'stride', n)}, "
                f"padding={spatial_arg(a, 'padding', n)}, output_padding={spatial_arg(a, 'output_padding', n)}, "
                f"groups={a['groups']}, dilation={spatial_arg(a, 'dilation', n)})")

    def exports_onnx(self, a, in_sigs):
        # ONNX ConvTranspose (and ONNX Runtime) accept output_padding only below the stride,
        # where PyTorch also accepts it below the dilation.
        strides = spatial_values(a, "stride", self.n)
        if any(op >= s for op, s in zip(spatial_values(a, "output_padding", self.n), strides)):
            return False
        return in_sigs[0][0] in ONNX_CONV_DTYPES


@register_op
class ConvTranspose1d(ConvTranspose2d):
    name = "conv_transpose1d"
    n = 1


@register_op
class ConvTranspose3d(ConvTranspose2d):
    name = "conv_transpose3d"
    n = 3

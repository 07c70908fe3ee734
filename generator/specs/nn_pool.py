"""Pooling: max/avg/lp pooling with every argument form, and adaptive avg/max pooling.

PyTorch's rules encoded here: padding at most half the kernel (the kernel, not the dilated
one), the ceil-mode rule that the last window must start inside the input or its left padding,
output sizes of at least one, stride None meaning the kernel size, and return_indices giving a
second, int64 output.
"""

from __future__ import annotations

import random
from typing import ClassVar

import z3

from nnforge.core.dtypes import INT_DTYPES
from nnforge.generator.abstract import AbsTensor
from nnforge.generator.spec import OpSpec, Sig, register_op, same_dtype_combos
from nnforge.generator.specs.nn_arith import (
    FLOATS, MAX_DILATION, MAX_KERNEL, MAX_STRIDE, at_least, bounded, divides_small, named_dims, fmt_float, spatial_arg, spatial_ints, window_out,
)


def _onnx_pool_ok(n: int, in_sigs) -> bool:
    """ONNX MaxPool/AveragePool: batched inputs only (the exporter writes invalid nodes for
    unbatched ones), no bfloat16, and ONNX Runtime has float32/float16 kernels for every rank."""
    return in_sigs[0][1] == n + 2 and in_sigs[0][0] in ("float32", "float16")


class _PoolBase(OpSpec):
    """x is (N?, C, *spatial) with n spatial dims; batched or unbatched."""

    n: ClassVar[int] = 2
    family = "nn"
    arity = 1

    @classmethod
    def ranks_at(cls, i: int):
        return (cls.n + 1, cls.n + 2)

    @classmethod
    def accepts(cls, in_sigs) -> bool:
        return len(in_sigs) == 1 and in_sigs[0][0] in {c[0] for c in cls.dtype_combos(1)} and in_sigs[0][1] in cls.ranks_at(0)

    @classmethod
    def deduct_inputs(cls, out: Sig, rng: random.Random) -> list[Sig] | None:
        if out[1] not in cls.ranks_at(0) or out[0] not in {c[0] for c in cls.dtype_combos(1)}:
            return None
        return [out]

    def _split(self, x: AbsTensor):
        n = self.n
        return list(x.shape[: x.rank - n]), list(x.shape[x.rank - n:])

    def _lead_cons(self, x: AbsTensor) -> list:
        """Only the batch dim of a batched input may be empty."""
        lead, spatial = self._split(x)
        keep = lead[1:] if x.rank == self.n + 2 else lead
        return at_least(keep) + at_least(spatial)


class _WindowPool(_PoolBase):
    """Kernel, stride (None = kernel), padding, dilation, ceil_mode."""

    has_padding: ClassVar[bool] = True
    has_dilation: ClassVar[bool] = False
    int_kernel_only: ClassVar[bool] = False

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        n = self.n
        form = lambda: rng.choice(("int", "tuple"))  # noqa: E731
        self.kernel = spatial_ints(self, "kernel", n, "int" if self.int_kernel_only else form())
        stride_form = self.choice_attr("stride_form", ("none", "int", "tuple"))
        self.stride = self.kernel if stride_form == "none" else spatial_ints(self, "stride", n, stride_form)
        self.padding = spatial_ints(self, "padding", n, form()) if self.has_padding else [0] * n
        self.dilation = spatial_ints(self, "dilation", n, form()) if self.has_dilation else [1] * n
        self.ceil_mode = self.bool_attr("ceil_mode")

    def _out_exprs(self, spatial):
        return [window_out(spatial[i], self.kernel[i], self.stride[i], self.padding[i], self.dilation[i], self.ceil_mode)
                for i in range(self.n)]

    def _out(self, spatial):
        return named_dims(self, self._out_exprs(spatial))[1]

    def requires(self, inputs):
        x = inputs[0]
        _, spatial = self._split(x)
        cons = self._lead_cons(x) + bounded(self.kernel, 1, MAX_KERNEL)
        if self.attrs["stride_form"] != "none":  # else the stride is the kernel
            cons += bounded(self.stride, 1, MAX_STRIDE)
        cons += bounded(self.dilation, 1, MAX_DILATION)
        cons += bounded(self.padding, 0, MAX_KERNEL)
        cons += [2 * p <= k for p, k in zip(self.padding, self.kernel) if not isinstance(p, int)]
        cons += self._windows_touch_input(spatial)
        named, outs = named_dims(self, self._out_exprs(spatial))
        return cons + named + [o >= 1 for o in outs]

    def _windows_touch_input(self, spatial) -> list:
        """Every window holds at least one input element. A dilated window that starts in the
        padding skips over an input shorter than the dilation (kernel 3, dilation 2, padding 1
        on a length-1 dim reads positions -1, 1 and 3): max pooling then returns -inf there
        for any input, which no value search can repair. With padding 0 or an input at least
        as long as the dilation, the first real position of every window lies inside."""
        cons = []
        for size, pad, dil in zip(spatial, self.padding, self.dilation):
            if isinstance(dil, int) and dil == 1:
                continue
            if isinstance(pad, int) and pad == 0:
                continue
            cons.append(z3.Or(pad == 0, size >= dil))
        return cons

    def _window_args(self, a) -> str:
        n = self.n
        stride = "None" if a["stride_form"] == "none" else spatial_arg(a, "stride", n)
        s = f"{spatial_arg(a, 'kernel', n)}, stride={stride}"
        if self.has_padding:
            s += f", padding={spatial_arg(a, 'padding', n)}"
        if self.has_dilation:
            s += f", dilation={spatial_arg(a, 'dilation', n)}"
        return s + f", ceil_mode={a['ceil_mode']}"


@register_op
class MaxPool2d(_WindowPool):
    name = "max_pool2d"
    n = 2
    has_dilation = True
    in_dtypes = same_dtype_combos(FLOATS + INT_DTYPES, 1)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        # max_pool1d has no integer kernel without indices; with indices it has.
        must_index = self.n == 1 and in_sigs[0][0] in INT_DTYPES
        self.attrs["return_indices"] = True if must_index else rng.choice((False, True))

    def type_transfer(self, inputs):
        x = inputs[0]
        lead, spatial = self._split(x)
        shape = lead + self._out(spatial)
        outs = [AbsTensor(x.dtype, shape)]
        if self.attrs["return_indices"]:
            outs.append(AbsTensor("int64", list(shape)))
        return outs

    def materialize(self, ins, a, in_shapes):
        x = ins[0]
        if self.n == 3 and len(in_shapes[0]) == 4:
            # eager's CPU max_pool3d rejects an unbatched input in the 4-d channels-last layout
            # ("Unsupported memory format"), which an earlier clone may have given it
            x = f"{x}.contiguous()"
        return f"F.max_pool{self.n}d({x}, {self._window_args(a)}, return_indices={a['return_indices']})"

    def exports_onnx(self, a, in_sigs):
        return _onnx_pool_ok(self.n, in_sigs)


@register_op
class MaxPool1d(MaxPool2d):
    name = "max_pool1d"
    n = 1


@register_op
class MaxPool3d(MaxPool2d):
    name = "max_pool3d"
    n = 3


@register_op
class AvgPool2d(_WindowPool):
    name = "avg_pool2d"
    n = 2
    in_dtypes = same_dtype_combos(FLOATS + ("int64",), 1)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.bool_attr("count_include_pad")
        if self.n > 1 and rng.random() < 0.4:
            self.divisor = self.int_attr("divisor_override")

    def requires(self, inputs):
        cons = super().requires(inputs)
        if "divisor_override" in self.attrs:
            cons += bounded([self.attrs["divisor_override"]], 1, 64)
        return cons

    def type_transfer(self, inputs):
        x = inputs[0]
        lead, spatial = self._split(x)
        return [AbsTensor(x.dtype, lead + self._out(spatial))]

    def materialize(self, ins, a, in_shapes):
        extra = f", divisor_override={a['divisor_override']}" if "divisor_override" in a else ""
        return (f"F.avg_pool{self.n}d({ins[0]}, {self._window_args(a)}, "
                f"count_include_pad={a['count_include_pad']}{extra})")

    def exports_onnx(self, a, in_sigs):
        return _onnx_pool_ok(self.n, in_sigs) and "divisor_override" not in a


@register_op
class AvgPool1d(AvgPool2d):
    name = "avg_pool1d"
    n = 1


@register_op
class AvgPool3d(AvgPool2d):
    """avg_pool3d alone also wants the unpadded input to be at least the kernel in every dim."""

    name = "avg_pool3d"
    n = 3
    in_dtypes = same_dtype_combos(("float32", "float64", "int64"), 1)

    def requires(self, inputs):
        _, spatial = self._split(inputs[0])
        return super().requires(inputs) + [s >= k for s, k in zip(spatial, self.kernel)]


@register_op
class LpPool2d(_WindowPool):
    """(sum over the window of x^p)^(1/p); no padding, no dilation."""

    name = "lp_pool2d"
    n = 2
    has_padding = False
    vulnerable = True
    in_dtypes = same_dtype_combos(FLOATS, 1)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.choice_attr("norm_type", (1.0, 2.0, 3.0, 0.5, 1.5))

    def type_transfer(self, inputs):
        x = inputs[0]
        lead, spatial = self._split(x)
        return [AbsTensor(x.dtype, lead + self._out(spatial))]

    def materialize(self, ins, a, in_shapes):
        return f"F.lp_pool{self.n}d({ins[0]}, {fmt_float(a['norm_type'])}, {self._window_args(a)})"

    def exports_onnx(self, a, in_sigs):
        return _onnx_pool_ok(self.n, in_sigs)


@register_op
class LpPool1d(LpPool2d):
    """lp_pool1d multiplies by kernel_size itself, so a 1-tuple kernel raises a TypeError."""

    name = "lp_pool1d"
    n = 1
    int_kernel_only = True


class _AdaptivePool(_PoolBase):
    """output_size: one int for every spatial dim, or a tuple whose None entries keep the input size."""

    in_dtypes = same_dtype_combos(FLOATS, 1)
    kind: ClassVar[str] = "avg"

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        n = self.n
        form = self.choice_attr("size_form", ("int", "tuple") if n == 1 else ("int", "tuple", "tuple_none"))
        if form == "int":
            self.sizes = spatial_ints(self, "output_size", n, "int")
        else:
            nones = [form == "tuple_none" and rng.random() < 0.5 for _ in range(n)]
            self.attrs["none_at"] = tuple(nones)
            self.sizes = [None if nones[i] else self.int_attr(f"output_size_{i}") for i in range(n)]
        if self.kind == "max":
            self.bool_attr("return_indices")
        # Evenly dividing windows are the only adaptive pools the ONNX exporter can express.
        self.bool_attr("even")

    def _out(self, spatial):
        return [spatial[i] if s is None else s for i, s in enumerate(self.sizes)]

    def requires(self, inputs):
        x = inputs[0]
        cons = self._lead_cons(x) + bounded([s for s in self.sizes if s is not None], 1, 16)
        if self.attrs["even"]:
            _, spatial = self._split(x)
            cons += [divides_small(s, d) for d, s in zip(spatial, self.sizes) if s is not None]
        return cons

    def type_transfer(self, inputs):
        x = inputs[0]
        lead, spatial = self._split(x)
        shape = lead + self._out(spatial)
        outs = [AbsTensor(x.dtype, shape)]
        if self.kind == "max" and self.attrs["return_indices"]:
            outs.append(AbsTensor("int64", list(shape)))
        return outs

    def materialize(self, ins, a, in_shapes):
        n = self.n
        if "output_size" in a:
            size = str(a["output_size"])
        else:
            none_at = a["none_at"]
            items = ["None" if none_at[i] else str(a[f"output_size_{i}"]) for i in range(n)]
            size = "(" + ", ".join(items) + ("," if n == 1 else "") + ")"
        extra = f", return_indices={a['return_indices']}" if self.kind == "max" else ""
        return f"F.adaptive_{self.kind}_pool{n}d({ins[0]}, {size}{extra})"

    def exports_onnx(self, a, in_sigs):
        # The TorchScript exporter maps adaptive pooling to ONNX only when the output size
        # divides the input size (or is 1).
        return a["even"] and _onnx_pool_ok(self.n, in_sigs)


@register_op
class AdaptiveAvgPool1d(_AdaptivePool):
    name = "adaptive_avg_pool1d"
    n = 1


@register_op
class AdaptiveAvgPool2d(_AdaptivePool):
    name = "adaptive_avg_pool2d"
    n = 2


@register_op
class AdaptiveAvgPool3d(_AdaptivePool):
    name = "adaptive_avg_pool3d"
    n = 3


@register_op
class AdaptiveMaxPool1d(_AdaptivePool):
    name = "adaptive_max_pool1d"
    n = 1
    kind = "max"


@register_op
class AdaptiveMaxPool2d(_AdaptivePool):
    name = "adaptive_max_pool2d"
    n = 2
    kind = "max"

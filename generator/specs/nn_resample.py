"""Resampling: F.interpolate in every mode, pixel_shuffle and pixel_unshuffle.

Scale factors are drawn from dyadic fractions (k/2, k/4) so that PyTorch's
floor(float(size) * scale) is exactly (size * k) // den, which the solver can reason about.
"""

from __future__ import annotations

from nnforge.core.dtypes import ALL_DTYPES
from nnforge.generator.abstract import AbsTensor
from nnforge.generator.spec import OpSpec, register_op, same_dtype_combos
from nnforge.generator.specs.nn_arith import FLOATS, at_least, bounded, div_small, divides_small, floordiv, mul_small

# scale factor -> (numerator, denominator), denominators powers of two so the float is exact
SCALES = {0.5: (1, 2), 0.75: (3, 4), 1.0: (1, 1), 1.25: (5, 4), 1.5: (3, 2), 2.0: (2, 1), 2.5: (5, 2), 3.0: (3, 1)}

MODES_BY_RANK = {
    3: ("nearest", "nearest-exact", "linear", "area"),
    4: ("nearest", "nearest-exact", "bilinear", "bicubic", "area"),
    5: ("nearest", "nearest-exact", "trilinear", "area"),
}
LINEAR_MODES = ("linear", "bilinear", "bicubic", "trilinear")
UINT8_MODES = ("nearest", "nearest-exact", "bilinear", "bicubic")


@register_op
class Interpolate(OpSpec):
    """F.interpolate(x, size | scale_factor, mode, align_corners, recompute_scale_factor, antialias)."""

    name = "interpolate"
    family = "nn"
    in_ranks = ((3, 4, 5),)
    in_dtypes = same_dtype_combos(FLOATS + ("uint8",), 1)

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out] if cls.accepts([out]) else None

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        dtype, rank = in_sigs[0]
        n = rank - 2
        modes = [m for m in MODES_BY_RANK.get(rank, ("nearest",)) if dtype != "uint8" or m in UINT8_MODES]
        mode = self.choice_attr("mode", modes)
        form = self.choice_attr("form", ("size_int", "size_tuple", "scale_float", "scale_tuple"))
        if form == "size_int":
            self.sizes = [self.int_attr("size")] * n
        elif form == "size_tuple":
            self.sizes = [self.int_attr(f"size_{i}") for i in range(n)]
        else:
            k = 1 if form == "scale_float" else n
            scales = [rng.choice(list(SCALES)) for _ in range(k)]
            self.attrs["scale"] = scales[0] if form == "scale_float" else tuple(scales)
            self.sizes = None
            self.choice_attr("recompute_scale_factor", (None, False, True))
        self.attrs["align_corners"] = rng.choice((None, False, True)) if mode in LINEAR_MODES else None
        aa_ok = mode in ("bilinear", "bicubic") and dtype in ("float32", "float64", "uint8")
        self.attrs["antialias"] = rng.choice((False, True)) if aa_ok else False

    def _out(self, x: AbsTensor):
        spatial = x.shape[2:]
        if self.sizes is not None:
            return list(self.sizes)
        scale = self.attrs["scale"]
        scales = scale if isinstance(scale, (tuple, list)) else [scale] * len(spatial)
        return [floordiv(d * SCALES[s][0], SCALES[s][1]) for d, s in zip(spatial, scales)]

    def requires(self, inputs):
        x = inputs[0]
        cons = at_least(x.shape)
        if self.sizes is not None:
            cons += bounded(self.sizes, 1, 32)
        return cons + [o >= 1 for o in self._out(x)]

    def type_transfer(self, inputs):
        x = inputs[0]
        return [AbsTensor(x.dtype, list(x.shape[:2]) + self._out(x))]

    def materialize(self, ins, a, in_shapes):
        n = len(in_shapes[0]) - 2
        form = a["form"]
        if form == "size_int":
            how = f"size={a['size']}"
        elif form == "size_tuple":
            how = "size=(" + ", ".join(str(a[f"size_{i}"]) for i in range(n)) + ("," if n == 1 else "") + ")"
        else:
            sc = a["scale"]
            how = f"scale_factor={sc!r}" if not isinstance(sc, (tuple, list)) else \
                "scale_factor=(" + ", ".join(repr(s) for s in sc) + ("," if n == 1 else "") + ")"
            how += f", recompute_scale_factor={a['recompute_scale_factor']}"
        return (f"F.interpolate({ins[0]}, {how}, mode={a['mode']!r}, align_corners={a['align_corners']}, "
                f"antialias={a['antialias']})")

    def exports_onnx(self, a, in_sigs):
        # area is adaptive average pooling (exportable only for even windows); nearest-exact and
        # antialias have no symbolic at opset 17; ONNX Runtime's Resize is float32 (and integer) only.
        return a["mode"] not in ("area", "nearest-exact") and not a["antialias"] and in_sigs[0][0] == "float32"


@register_op
class PixelShuffle(OpSpec):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r)."""

    name = "pixel_shuffle"
    family = "nn"
    zero_size_ok = False  # an empty input comes back unchanged, not reshaped
    in_ranks = ((3, 4, 5),)
    in_dtypes = same_dtype_combos(ALL_DTYPES, 1)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.r = self.int_attr("factor")

    @classmethod
    def deduct_inputs(cls, out, rng):
        return [out] if cls.accepts([out]) else None

    def requires(self, inputs):
        x, r = inputs[0], self.r
        return bounded([r], 1, 4) + [divides_small(mul_small(r, r), x.shape[-3])]

    def type_transfer(self, inputs):
        x, r = inputs[0], self.r
        s = x.shape
        return [AbsTensor(x.dtype, list(s[:-3]) + [div_small(s[-3], mul_small(r, r)), mul_small(s[-2], r),
                                                   mul_small(s[-1], r)])]

    def _operand(self, x: str) -> str:
        # eager rejects a channels_last_3d 5-d input ("Unsupported memory format"), though a
        # contiguous one works: an eager bug (torch 2.13), so such inputs get a copy first
        return f"{x}.contiguous()" if self.in_sigs[0][1] == 5 else x

    def materialize(self, ins, a, in_shapes):
        return f"F.pixel_shuffle({self._operand(ins[0])}, {a['factor']})"

    def exports_onnx(self, a, in_sigs):
        return in_sigs[0][1] == 4 and in_sigs[0][0] in ("float32", "float64")


@register_op
class PixelUnshuffle(PixelShuffle):
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W)."""

    name = "pixel_unshuffle"

    def requires(self, inputs):
        x, r = inputs[0], self.r
        return bounded([r], 1, 4) + [divides_small(r, x.shape[-2]), divides_small(r, x.shape[-1])]

    def type_transfer(self, inputs):
        x, r = inputs[0], self.r
        s = x.shape
        return [AbsTensor(x.dtype, list(s[:-3]) + [mul_small(s[-3], mul_small(r, r)), div_small(s[-2], r),
                                                   div_small(s[-1], r)])]

    def materialize(self, ins, a, in_shapes):
        return f"F.pixel_unshuffle({self._operand(ins[0])}, {a['factor']})"

"""Elementwise operators: unary math, binary arithmetic with broadcasting (tensor-tensor and
tensor-scalar forms), activations, clamp, where.

Every dtype list below was measured on PyTorch 2.13 CPU eager, and every `onnx_dtypes` list on
the TorchScript exporter (opset 17) followed by an ONNX Runtime 1.32 CPU session that loads and
runs the model: a model ORT cannot load is no use to the oracle, so "exports" means both.
bfloat16 is never in `onnx_dtypes` (ORT has almost no bfloat16 kernels and numpy cannot feed it).

Value caveats the solver cannot express (it only reasons about shapes):
- integer division, remainder and fmod raise ZeroDivisionError in eager when a divisor element is
  0, so their tensor-tensor forms take floats only and their scalar forms use a non-zero scalar;
- scalars are kept within the value range of the tensor's dtype (uint8 gets no negative scalar:
  PyTorch silently wraps it), because a scalar that does not fit makes eager raise or wrap;
- shifts by a negative amount or by >= the bit width are defined by PyTorch (result 0 or -1) but
  are undefined behaviour in C; such specs say `shift_amount_undefined = True`.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar, Sequence

import z3

from nnforge.core.dtypes import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, is_float
from nnforge.generator.abstract import AbsTensor
from nnforge.generator.spec import OpSpec, Sig, broadcast, broadcast_all, register_op, same_dtype_combos

SIGNED_INTS = ("int8", "int16", "int32", "int64")
INTS_AND_BOOL = INT_DTYPES + ("bool",)
NO_BOOL = NUMERIC_DTYPES
ONNX_FLOATS = ("float32", "float64", "float16")
ONNX_ALL = tuple(d for d in ALL_DTYPES if d != "bfloat16")
ONNX_NUMERIC = tuple(d for d in NUMERIC_DTYPES if d != "bfloat16")
# ORT Max/Min/Where/Clip have no int16 kernels.
ONNX_MINMAX = ("float32", "float64", "float16", "int8", "int32", "int64", "uint8")

# Scalars (as source text, so that attributes stay JSON-safe and print as written).
FLOAT_SCALARS = ("0.0", "1.0", "-1.0", "0.5", "-2.5", "2", "3", "-1", "0.001", "100.0", "-0.0")
SIGNED_SCALARS = ("0", "1", "-1", "2", "3", "-7", "100")
UINT8_SCALARS = ("0", "1", "2", "3", "7", "100")
BOOL_SCALARS = ("True", "False")


def scalar_pool(dtype: str, nonzero: bool = False) -> tuple[str, ...]:
    """Python scalars that combine with a `dtype` tensor without changing the result dtype."""
    if is_float(dtype):
        pool = FLOAT_SCALARS
    elif dtype == "uint8":
        pool = UINT8_SCALARS
    elif dtype == "bool":
        pool = BOOL_SCALARS
    else:
        pool = SIGNED_SCALARS
    if nonzero:
        pool = tuple(s for s in pool if s not in ("0", "0.0", "-0.0", "False"))
    return pool


def result_dtype(rule: str, dtype: str) -> str:
    """Output dtype of an elementwise op under one of PyTorch's result-type rules."""
    if rule == "same":
        return dtype
    if rule == "float":  # integral inputs promote to the default float dtype
        return dtype if is_float(dtype) else "float32"
    if rule == "bool":
        return "bool"
    if rule == "float64":
        return "float64"
    if rule == "bool_to_int64":  # e.g. square: bool ** 2 promotes to int64
        return "int64" if dtype == "bool" else dtype
    raise ValueError(f"unknown result rule {rule!r}")


def kwargs_text(a: dict[str, Any], names: Sequence[str]) -> str:
    """`, k=v` for each attribute that is set (None means: use PyTorch's default)."""
    return "".join(f", {k}={a[k]}" for k in names if a.get(k) is not None)


class ElementwiseSpec(OpSpec):
    """Shared typing for elementwise ops: a result-type rule and measured ONNX dtypes."""

    family = "elementwise"
    onnx = False
    out_rule: ClassVar[str] = "same"
    # Data-input dtypes for which export + ORT work. Empty: never exports.
    onnx_dtypes: ClassVar[tuple[str, ...]] = ()
    # Position of the input whose dtype decides the result (where: 1, after the condition).
    data_index: ClassVar[int] = 0

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        # a class listing its ONNX dtypes exports iff the list is non-empty; others inherit
        # `onnx` (classes that decide per instance in exports_onnx set `onnx = True` themselves)
        if "onnx_dtypes" in cls.__dict__:
            cls.onnx = bool(cls.onnx_dtypes)

    @classmethod
    def out_dtype(cls, dtype: str) -> str:
        return result_dtype(cls.out_rule, dtype)

    def data_dtype(self) -> str:
        return self.in_sigs[self.data_index][0]

    def exports_onnx(self, a: dict[str, Any], in_sigs: Sequence[Sig]) -> bool:
        return in_sigs[self.data_index][0] in self.onnx_dtypes


class UnarySpec(ElementwiseSpec):
    """y = f(x), same shape; the result dtype follows `out_rule`."""

    arity = 1
    fn = ""  # e.g. "torch.neg"

    def type_transfer(self, inputs: list[AbsTensor]) -> list[AbsTensor]:
        return [AbsTensor(self.out_dtype(inputs[0].dtype), list(inputs[0].shape))]

    @classmethod
    def deduct_inputs(cls, out: Sig, rng: random.Random) -> list[Sig] | None:
        if out[1] not in cls.ranks_at(0):
            return None
        cands = [c[0] for c in cls.dtype_combos(1) if cls.out_dtype(c[0]) == out[0]]
        return [(rng.choice(cands), out[1])] if cands else None

    def materialize(self, ins, a, in_shapes) -> str:
        return f"{self.fn}({ins[0]}{self.extra_args(a)})"

    def extra_args(self, a: dict[str, Any]) -> str:
        return ""


def unary(name: str, fn: str, dtypes: Sequence[str], rule: str = "same", onnx: Sequence[str] = (),
          vulnerable: bool = False) -> type[UnarySpec]:
    """Declare and register an attribute-free unary op (one line per op keeps the table readable)."""
    cls = type(
        "".join(p.capitalize() for p in name.split("_")),
        (UnarySpec,),
        {
            "name": name, "fn": fn, "in_dtypes": same_dtype_combos(dtypes, 1), "out_rule": rule,
            "onnx_dtypes": tuple(onnx), "vulnerable": vulnerable, "__module__": __name__,
            "__doc__": f"{fn}(x)",
        },
    )
    return register_op(cls)


# -- unary math -------------------------------------------------------------------------------
# "float" rule: integral and bool inputs compute in float32 (PyTorch's int-to-float promotion).
Abs = unary("abs", "torch.abs", NO_BOOL, onnx=ONNX_NUMERIC)
Neg = unary("neg", "torch.neg", NO_BOOL, onnx=SIGNED_INTS + ONNX_FLOATS)
Sign = unary("sign", "torch.sign", ALL_DTYPES, onnx=ONNX_NUMERIC)
Sgn = unary("sgn", "torch.sgn", ALL_DTYPES)
Exp = unary("exp", "torch.exp", ALL_DTYPES, "float", ONNX_FLOATS, vulnerable=True)
Exp2 = unary("exp2", "torch.exp2", ALL_DTYPES, "float", vulnerable=True)
Expm1 = unary("expm1", "torch.expm1", ALL_DTYPES, "float", vulnerable=True)
Log = unary("log", "torch.log", ALL_DTYPES, "float", ONNX_FLOATS, vulnerable=True)
Log2 = unary("log2", "torch.log2", ALL_DTYPES, "float", ONNX_FLOATS, vulnerable=True)
Log10 = unary("log10", "torch.log10", ALL_DTYPES, "float", ONNX_FLOATS, vulnerable=True)
Log1p = unary("log1p", "torch.log1p", ALL_DTYPES, "float", ONNX_FLOATS, vulnerable=True)
Sqrt = unary("sqrt", "torch.sqrt", ALL_DTYPES, "float", ONNX_NUMERIC, vulnerable=True)
Rsqrt = unary("rsqrt", "torch.rsqrt", ALL_DTYPES, "float", ONNX_NUMERIC, vulnerable=True)
Reciprocal = unary("reciprocal", "torch.reciprocal", ALL_DTYPES, "float", ONNX_ALL, vulnerable=True)
Sin = unary("sin", "torch.sin", ALL_DTYPES, "float", ONNX_FLOATS)
Cos = unary("cos", "torch.cos", ALL_DTYPES, "float", ONNX_FLOATS)
Tan = unary("tan", "torch.tan", ALL_DTYPES, "float", ("float32", "float16"), vulnerable=True)
Asin = unary("asin", "torch.asin", ALL_DTYPES, "float", ("float32", "float16"), vulnerable=True)
Acos = unary("acos", "torch.acos", ALL_DTYPES, "float", ("float32", "float16"), vulnerable=True)
Atan = unary("atan", "torch.atan", ALL_DTYPES, "float", ("float32", "float16"))
Sinh = unary("sinh", "torch.sinh", ALL_DTYPES, "float", vulnerable=True)
Cosh = unary("cosh", "torch.cosh", ALL_DTYPES, "float", vulnerable=True)
Tanh = unary("tanh", "torch.tanh", ALL_DTYPES, "float", ONNX_FLOATS)
Asinh = unary("asinh", "torch.asinh", ALL_DTYPES, "float")
Acosh = unary("acosh", "torch.acosh", ALL_DTYPES, "float", vulnerable=True)
Atanh = unary("atanh", "torch.atanh", ALL_DTYPES, "float", vulnerable=True)
Sigmoid = unary("sigmoid", "torch.sigmoid", ALL_DTYPES, "float", ONNX_FLOATS)
Floor = unary("floor", "torch.floor", NO_BOOL, onnx=ONNX_FLOATS)
Ceil = unary("ceil", "torch.ceil", NO_BOOL, onnx=ONNX_FLOATS)
Trunc = unary("trunc", "torch.trunc", NO_BOOL)
Frac = unary("frac", "torch.frac", FLOAT_DTYPES)
Erf = unary("erf", "torch.erf", ALL_DTYPES, "float", ("float32", "float16"))
Erfc = unary("erfc", "torch.erfc", ALL_DTYPES, "float")
Erfinv = unary("erfinv", "torch.erfinv", ALL_DTYPES, "float", vulnerable=True)
Square = unary("square", "torch.square", ALL_DTYPES, "bool_to_int64", ONNX_NUMERIC)
BitwiseNot = unary("bitwise_not", "torch.bitwise_not", INTS_AND_BOOL, onnx=("bool",))
LogicalNot = unary("logical_not", "torch.logical_not", ALL_DTYPES, "bool", ONNX_ALL)
Positive = unary("positive", "torch.positive", NO_BOOL)
Deg2rad = unary("deg2rad", "torch.deg2rad", ALL_DTYPES, "float")
Rad2deg = unary("rad2deg", "torch.rad2deg", ALL_DTYPES, "float")
Lgamma = unary("lgamma", "torch.lgamma", ALL_DTYPES, "float", vulnerable=True)
Digamma = unary("digamma", "torch.digamma", ALL_DTYPES, "float", vulnerable=True)
I0 = unary("i0", "torch.i0", ALL_DTYPES, "float", vulnerable=True)
Sinc = unary("sinc", "torch.sinc", ALL_DTYPES, "float")

# -- activations without attributes -------------------------------------------------------------
Relu = unary("relu", "torch.relu", NO_BOOL, onnx=("float32", "float64", "float16", "int8", "int32"))
Relu6 = unary("relu6", "F.relu6", NO_BOOL, onnx=ONNX_MINMAX)
Silu = unary("silu", "F.silu", FLOAT_DTYPES, onnx=ONNX_FLOATS)
Hardswish = unary("hardswish", "F.hardswish", FLOAT_DTYPES, onnx=("float32", "float16"))
Hardsigmoid = unary("hardsigmoid", "F.hardsigmoid", FLOAT_DTYPES, onnx=("float32", "float16"))
Mish = unary("mish", "F.mish", FLOAT_DTYPES, onnx=("float32", "float16"))
Selu = unary("selu", "F.selu", FLOAT_DTYPES, onnx=("float32", "float16"))
Softsign = unary("softsign", "F.softsign", NO_BOOL, "float", ONNX_NUMERIC)
Logsigmoid = unary("logsigmoid", "F.logsigmoid", FLOAT_DTYPES, onnx=ONNX_FLOATS)
Tanhshrink = unary("tanhshrink", "F.tanhshrink", NO_BOOL, "float", ONNX_FLOATS)


# -- unary ops with attributes ------------------------------------------------------------------
@register_op
class Round(UnarySpec):
    """torch.round(x, decimals=d): decimals may be negative (round to tens); floats only with decimals."""

    name = "round"
    fn = "torch.round"
    in_dtypes = same_dtype_combos(NO_BOOL, 1)
    onnx_dtypes = ONNX_NUMERIC

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        choices = (None, 0, 1, 2, 3, -1, -2) if is_float(in_sigs[0][0]) else (None,)
        self.choice_attr("decimals", choices)

    def extra_args(self, a):
        return kwargs_text(a, ["decimals"])

    def exports_onnx(self, a, in_sigs):
        if a.get("decimals") is not None:
            return in_sigs[0][0] in ONNX_FLOATS
        return super().exports_onnx(a, in_sigs)


@register_op
class Logit(UnarySpec):
    """torch.logit(x, eps): eps None leaves 0 and 1 to give -inf/inf; eps > 0.5 inverts the clamp."""

    name = "logit"
    fn = "torch.logit"
    in_dtypes = same_dtype_combos(ALL_DTYPES, 1)
    out_rule = "float"
    onnx_dtypes = ONNX_ALL
    vulnerable = True

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.choice_attr("eps", (None, 0.0, 1e-6, 0.1, 0.5, 0.6))

    def extra_args(self, a):
        return kwargs_text(a, ["eps"])


@register_op
class NanToNum(UnarySpec):
    """torch.nan_to_num with each replacement left default or set (kept inside the dtype's range)."""

    name = "nan_to_num"
    fn = "torch.nan_to_num"
    in_dtypes = same_dtype_combos(ALL_DTYPES, 1)
    onnx_dtypes = ONNX_ALL

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        dt = in_sigs[0][0]
        if is_float(dt):
            pools = {"nan": (None, 0.0, 1.5, -1.0), "posinf": (None, 0.0, 100.0, 65504.0), "neginf": (None, 0.0, -100.0, -65504.0)}
        elif dt == "uint8" or dt == "bool":
            pools = {"nan": (None, 0, 1), "posinf": (None, 1), "neginf": (None, 0)}
        else:
            pools = {"nan": (None, 0, 1), "posinf": (None, 100), "neginf": (None, -100)}
        for k, pool in pools.items():
            self.choice_attr(k, pool)

    def extra_args(self, a):
        return kwargs_text(a, ["nan", "posinf", "neginf"])


@register_op
class Gelu(UnarySpec):
    name = "gelu"
    fn = "F.gelu"
    in_dtypes = same_dtype_combos(FLOAT_DTYPES, 1)
    onnx_dtypes = ONNX_FLOATS

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.choice_attr("approximate", ("none", "tanh", None))

    def extra_args(self, a):
        return f", approximate={a['approximate']!r}" if a.get("approximate") else ""

    def exports_onnx(self, a, in_sigs):
        ok = ONNX_FLOATS if a.get("approximate") == "tanh" else ("float32", "float16")
        return in_sigs[0][0] in ok


class FloatParamActivation(UnarySpec):
    """An activation with float keyword parameters drawn from `params` (edge values included)."""

    in_dtypes = same_dtype_combos(FLOAT_DTYPES, 1)
    params: ClassVar[dict[str, tuple[Any, ...]]] = {}

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        for k, pool in self.params.items():
            self.choice_attr(k, pool)

    def extra_args(self, a):
        return kwargs_text(a, list(self.params))


@register_op
class LeakyRelu(FloatParamActivation):
    name = "leaky_relu"
    fn = "F.leaky_relu"
    params = {"negative_slope": (None, 0.0, 0.01, 0.2, -0.5, 1.0, 2.0)}
    onnx_dtypes = ONNX_FLOATS


@register_op
class Elu(FloatParamActivation):
    name = "elu"
    fn = "F.elu"
    params = {"alpha": (None, 1.0, 0.5, 0.0, -1.0, 2.0)}
    onnx_dtypes = ("float32", "float16")


@register_op
class Celu(FloatParamActivation):
    """alpha = 0 divides by zero (eager raises), so it is left out."""

    name = "celu"
    fn = "F.celu"
    params = {"alpha": (None, 1.0, 0.5, 2.0, -1.0)}
    onnx_dtypes = ("float32", "float64")


@register_op
class Softplus(FloatParamActivation):
    """beta may be negative; threshold at or below 0 makes the linear branch take over early."""

    name = "softplus"
    fn = "F.softplus"
    params = {"beta": (None, 1.0, 0.5, 2.0, -1.0, 10.0), "threshold": (None, 20.0, 5.0, 1.0, 0.0, -2.0)}
    onnx_dtypes = ("float32", "float16")
    vulnerable = True


@register_op
class Hardshrink(FloatParamActivation):
    name = "hardshrink"
    fn = "F.hardshrink"
    params = {"lambd": (None, 0.0, 0.5, 1.0, 2.0)}
    onnx_dtypes = ONNX_FLOATS


@register_op
class Softshrink(FloatParamActivation):
    name = "softshrink"
    fn = "F.softshrink"
    params = {"lambd": (None, 0.0, 0.5, 1.0, 2.0)}
    onnx_dtypes = ONNX_FLOATS


@register_op
class Rrelu(UnarySpec):
    """F.rrelu in eval mode is deterministic (slope (lower+upper)/2); lower <= upper is required."""

    name = "rrelu"
    fn = "F.rrelu"
    in_dtypes = same_dtype_combos(FLOAT_DTYPES, 1)
    onnx_dtypes = ONNX_FLOATS

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        lower, upper = rng.choice([(1 / 8, 1 / 3), (0.1, 0.1), (0.0, 0.5), (-0.5, 0.5), (0.0, 0.0), (0.5, 2.0)])
        self.attrs.update(lower=lower, upper=upper)

    def extra_args(self, a):
        return f", lower={a['lower']!r}, upper={a['upper']!r}, training=False"


@register_op
class Hardtanh(UnarySpec):
    """F.hardtanh(x, min_val, max_val) with min_val <= max_val (equal is allowed: a constant)."""

    name = "hardtanh"
    fn = "F.hardtanh"
    in_dtypes = same_dtype_combos(NO_BOOL, 1)
    onnx_dtypes = ("float32", "float64", "float16", "int8", "int32", "int64")

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        dt = in_sigs[0][0]
        if is_float(dt):
            pairs = [(None, None), (-1.0, 1.0), (-0.5, 2.0), (0.0, 6.0), (1.0, 1.0), (-2.0, -1.0), (0.25, 0.5)]
        elif dt == "uint8":  # a negative bound on uint8 raises
            pairs = [(0, 6), (1, 1), (2, 100), (0, 0)]
        else:
            pairs = [(None, None), (-1, 1), (0, 6), (2, 2), (-5, -3), (-100, 100)]
        lo, hi = rng.choice(pairs)
        self.attrs.update(min_val=lo, max_val=hi)

    def extra_args(self, a):
        return kwargs_text(a, ["min_val", "max_val"])


@register_op
class Threshold(UnarySpec):
    """F.threshold(x, threshold, value): y = x if x > threshold else value."""

    name = "threshold"
    fn = "F.threshold"
    in_dtypes = same_dtype_combos(NO_BOOL, 1)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        dt = in_sigs[0][0]
        if is_float(dt):
            th, val = (0.0, 0.5, -1.0, 1e-3, 2.0), (0.0, -2.0, 5.0, 0.5)
        elif dt == "uint8":
            th, val = (0, 1, 5), (0, 3, 100)
        else:
            th, val = (0, 1, -2, 5), (0, -3, 7, 100)
        self.choice_attr("threshold", th)
        self.choice_attr("value", val)

    def extra_args(self, a):
        return f", {a['threshold']!r}, {a['value']!r}"


@register_op
class ClampScalar(UnarySpec):
    """torch.clamp with scalar bounds: min only, max only, both, and min > max (all become max)."""

    name = "clamp"
    fn = "torch.clamp"
    in_dtypes = same_dtype_combos(NO_BOOL, 1)
    onnx_dtypes = ONNX_MINMAX

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        pool = scalar_pool(in_sigs[0][0])
        mode = self.choice_attr("mode", ("min", "max", "both", "inverted", "method"))
        lo, hi = sorted(rng.sample(pool, 2), key=float)
        if mode == "inverted":
            lo, hi = hi, lo
        self.attrs.update(min=None if mode == "max" else lo, max=None if mode == "min" else hi)

    def materialize(self, ins, a, in_shapes) -> str:
        if a["mode"] == "method":
            return f"{ins[0]}.clamp({a['min']}, {a['max']})"
        return f"torch.clamp({ins[0]}{kwargs_text(a, ['min', 'max'])})"


# -- binary ops ---------------------------------------------------------------------------------
class BinarySpec(ElementwiseSpec):
    """z = f(x, y) with broadcasting; both inputs share a dtype (mixed dtypes: see cast.py).

    With `scalar_form`, the spec also covers the tensor-scalar forms (arity 1): `f(x, s)`, the
    Python operator `x OP s`, and where PyTorch allows it the reflected `s OP x`.
    """

    arity = 2
    fn = ""
    operator: ClassVar[str | None] = None  # Python operator, e.g. "+"
    scalar_form: ClassVar[bool] = True
    # dtypes allowed in the scalar form (default: those of the tensor-tensor form)
    scalar_dtypes: ClassVar[Sequence[str] | None] = None
    # dtypes for which the reflected form `s OP x` is allowed; None: all scalar-form dtypes
    reflected_dtypes: ClassVar[Sequence[str] | None] = None
    nonzero_scalar: ClassVar[bool] = False  # the scalar is a divisor (x OP s), so never 0
    onnx_scalar_dtypes: ClassVar[tuple[str, ...] | None] = None

    @classmethod
    def pick_arity(cls, rng: random.Random) -> int:
        return rng.choice((1, 2, 2)) if cls.scalar_form else 2

    @classmethod
    def dtype_combos(cls, arity: int) -> list[tuple[str, ...]]:
        if arity == 1:
            if not cls.scalar_form:
                return []
            dts = cls.scalar_dtypes if cls.scalar_dtypes is not None else [c[0] for c in super().dtype_combos(2)]
            return [(d,) for d in dts]
        return super().dtype_combos(arity)

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        if len(in_sigs) == 1:
            dt = in_sigs[0][0]
            forms = ["fn"]
            if self.operator:
                forms.append("op")
                if self.reflected_dtypes is None or dt in self.reflected_dtypes:
                    forms.append("rop")
            self.choice_attr("form", forms)
            # A divisor must not be 0: integers raise, and for floats x / 0.0, x % 0.0 are
            # NaN/Inf for every x, which no value search can repair. In `s OP x` s is no divisor.
            divisor = self.nonzero_scalar and not (is_float(dt) and self.attrs["form"] == "rop")
            pool = scalar_pool(dt, nonzero=divisor)
            if divisor and not is_float(dt):
                # INT_MIN / -1 and INT_MIN % -1 overflow: eager dies on SIGFPE (a NaN cast to int
                # upstream is enough to make INT_MIN), so -1 is no integer divisor here
                pool = [p for p in pool if p != "-1"]
            self.choice_attr("scalar", pool)
        else:
            self.choice_attr("form", ["fn"] + (["op"] if self.operator else []))

    def requires(self, inputs):
        if len(inputs) == 1:
            return []
        cons, _ = broadcast(inputs[0].shape, inputs[1].shape)
        return cons

    def type_transfer(self, inputs):
        if len(inputs) == 1:
            shape = list(inputs[0].shape)
        else:
            _, shape = broadcast(inputs[0].shape, inputs[1].shape)
        return [AbsTensor(self.out_dtype(inputs[0].dtype), shape)]

    @classmethod
    def deduct_inputs(cls, out: Sig, rng: random.Random) -> list[Sig] | None:
        arity = cls.pick_arity(rng)
        cands = [c[0] for c in cls.dtype_combos(arity) if cls.out_dtype(c[0]) == out[0]]
        if not cands:
            return None
        dt = rng.choice(cands)
        if arity == 1:
            return [(dt, out[1])]
        sides = [(dt, out[1]), (dt, rng.randint(0, out[1]))]  # one side may broadcast from a lower rank
        rng.shuffle(sides)
        return sides

    def keyword_args(self, a: dict[str, Any]) -> str:
        return ""

    def materialize(self, ins, a, in_shapes) -> str:
        form = a.get("form", "fn")
        other = ins[1] if len(ins) == 2 else a["scalar"]
        if form == "op":
            return f"({ins[0]} {self.operator} {other})"
        if form == "rop":
            if self.operator == "**" and str(other).startswith("-"):
                other = f"({other})"  # -1 ** x is -(1 ** x) in Python
            return f"({other} {self.operator} {ins[0]})"
        return f"{self.fn}({ins[0]}, {other}{self.keyword_args(a)})"

    def exports_onnx(self, a, in_sigs):
        if len(in_sigs) == 1 and self.onnx_scalar_dtypes is not None:
            return in_sigs[0][0] in self.onnx_scalar_dtypes
        ok = self.onnx_dtypes if len(in_sigs) == 2 else tuple(d for d in self.onnx_dtypes if d != "bool")
        return in_sigs[0][0] in ok


def binary(name: str, fn: str, dtypes: Sequence[str], rule: str = "same", onnx: Sequence[str] = (),
           operator: str | None = None, scalar: bool = True, vulnerable: bool = False,
           scalar_dtypes: Sequence[str] | None = None) -> type[BinarySpec]:
    """Declare and register an attribute-free binary op."""
    cls = type(
        "".join(p.capitalize() for p in name.split("_")),
        (BinarySpec,),
        {
            "name": name, "fn": fn, "in_dtypes": same_dtype_combos(dtypes, 2), "out_rule": rule,
            "onnx_dtypes": tuple(onnx), "operator": operator, "scalar_form": scalar, "vulnerable": vulnerable,
            "scalar_dtypes": scalar_dtypes, "__module__": __name__, "__doc__": f"{fn}(x, y)",
        },
    )
    return register_op(cls)


@register_op
class Add(BinarySpec):
    """torch.add(x, y, alpha=a): alpha is int for integer dtypes, bool for bool, any for floats."""

    name = "add"
    fn = "torch.add"
    operator = "+"
    in_dtypes = same_dtype_combos(ALL_DTYPES, 2)
    onnx_dtypes = ONNX_NUMERIC
    alphas: ClassVar[dict[str, tuple[str | None, ...]]] = {
        "float": (None, "1", "2", "-1", "0.5", "0", "-0.25"),
        "int": (None, "1", "2", "-1", "0", "3"),
        "bool": (None, "True", "False"),
    }

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        dt = in_sigs[0][0]
        kind = "float" if is_float(dt) else "bool" if dt == "bool" else "int"
        self.choice_attr("alpha", self.alphas[kind] if self.attrs["form"] == "fn" else (None,))

    def keyword_args(self, a):
        return kwargs_text(a, ["alpha"])


@register_op
class Sub(Add):
    """torch.sub(x, y, alpha=a); bool is rejected by PyTorch. The reflected form is `s - x`."""

    name = "sub"
    fn = "torch.sub"
    operator = "-"
    in_dtypes = same_dtype_combos(NO_BOOL, 2)
    onnx_dtypes = ONNX_NUMERIC


@register_op
class Rsub(BinarySpec):
    """torch.rsub(x, y, alpha) = y - alpha * x."""

    name = "rsub"
    fn = "torch.rsub"
    in_dtypes = same_dtype_combos(NO_BOOL, 2)
    onnx_dtypes = ONNX_NUMERIC

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        self.choice_attr("alpha", Add.alphas["float" if is_float(in_sigs[0][0]) else "int"])

    def keyword_args(self, a):
        return kwargs_text(a, ["alpha"])


Mul = binary("mul", "torch.mul", ALL_DTYPES, onnx=ONNX_ALL, operator="*")


@register_op
class Div(BinarySpec):
    """True division: integral inputs give float32; x / 0 gives inf or nan (no error)."""

    name = "div"
    fn = "torch.div"
    operator = "/"
    in_dtypes = same_dtype_combos(ALL_DTYPES, 2)
    out_rule = "float"
    onnx_dtypes = ONNX_ALL
    onnx_scalar_dtypes = ONNX_NUMERIC
    nonzero_scalar = True  # x / 0.0 is Inf/NaN whatever x is
    vulnerable = True

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        if self.attrs["form"] == "fn":
            self.choice_attr("function", ("torch.div", "torch.true_divide", "torch.divide"))

    def materialize(self, ins, a, in_shapes) -> str:
        if a.get("form") == "fn":
            other = ins[1] if len(ins) == 2 else a["scalar"]
            return f"{a['function']}({ins[0]}, {other})"
        return super().materialize(ins, a, in_shapes)


@register_op
class DivRounding(BinarySpec):
    """torch.div(x, y, rounding_mode="trunc"|"floor"), torch.floor_divide and `//`.

    Integer division by a zero element raises in eager, and values cannot be constrained, so the
    tensor-tensor form takes floats only; integers get the scalar form with a non-zero divisor.
    """

    name = "div_rounding"
    fn = "torch.div"
    operator = "//"
    in_dtypes = same_dtype_combos(FLOAT_DTYPES, 2)
    scalar_dtypes = NO_BOOL
    reflected_dtypes = FLOAT_DTYPES
    nonzero_scalar = True
    onnx_dtypes = ONNX_FLOATS
    onnx_scalar_dtypes = ONNX_NUMERIC
    vulnerable = True

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        if self.attrs["form"] == "fn":
            self.choice_attr("rounding_mode", ("trunc", "floor", "floor_divide"))

    def materialize(self, ins, a, in_shapes) -> str:
        if a.get("form") == "fn":
            other = ins[1] if len(ins) == 2 else a["scalar"]
            if a["rounding_mode"] == "floor_divide":
                return f"torch.floor_divide({ins[0]}, {other})"
            return f"torch.div({ins[0]}, {other}, rounding_mode={a['rounding_mode']!r})"
        return super().materialize(ins, a, in_shapes)

    def exports_onnx(self, a, in_sigs):
        # ORT has no int16 kernel for the Where inside the exported floor division.
        if a.get("rounding_mode") == "floor" and in_sigs[0][0] == "int16":
            return False
        return super().exports_onnx(a, in_sigs)


class ModuloSpec(BinarySpec):
    """remainder / fmod: floats in the tensor-tensor form (integer % 0 raises), a non-zero scalar
    divisor for integers; the reflected `s % x` divides by the tensor, so floats only."""

    in_dtypes = same_dtype_combos(FLOAT_DTYPES, 2)
    scalar_dtypes = NO_BOOL
    reflected_dtypes = FLOAT_DTYPES
    nonzero_scalar = True
    onnx_dtypes = ONNX_FLOATS
    onnx_scalar_dtypes = ONNX_NUMERIC
    vulnerable = True


@register_op
class Remainder(ModuloSpec):
    name = "remainder"
    fn = "torch.remainder"
    operator = "%"


@register_op
class Fmod(ModuloSpec):
    name = "fmod"
    fn = "torch.fmod"


@register_op
class Pow(BinarySpec):
    """x ** y. Tensor exponents: floats and integers (an integer base to a negative integer
    tensor power gives 0 in PyTorch). Scalar exponents include 0, 0.5, 2, -1, 3, fractional and
    negative ones for floats; integer tensors take non-negative integer exponents only
    (a negative one raises) and bool takes bool exponents (others promote: see cast.py).
    The reflected form `s ** x` is a scalar base."""

    name = "pow"
    fn = "torch.pow"
    operator = "**"
    in_dtypes = same_dtype_combos(NO_BOOL, 2)
    scalar_dtypes = ALL_DTYPES
    reflected_dtypes = NO_BOOL
    onnx_dtypes = ("float32", "float64", "float16", "int32", "int64")
    vulnerable = True
    float_exponents = ("0", "0.5", "2", "-1", "3", "1.5", "-0.5", "1", "-2", "0.0", "2.0", "0.3333", "-2.5", "4")
    int_exponents = ("0", "1", "2", "3", "5")

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        if len(in_sigs) == 1:
            dt = in_sigs[0][0]
            if self.attrs["form"] == "rop":  # scalar base
                # no negative float base: (-1.5) ** x is NaN unless x is a whole number, which
                # no value search reaches
                pool = ("2", "0.5", "0", "1", "2.718", "10.0") if is_float(dt) else \
                    (("2", "0", "1", "3") if dt == "uint8" else ("2", "0", "1", "-1", "3", "-2"))
            else:
                pool = self.float_exponents if is_float(dt) else BOOL_SCALARS if dt == "bool" else self.int_exponents
            self.choice_attr("scalar", pool)

    def exports_onnx(self, a, in_sigs):
        dt = in_sigs[0][0]
        if len(in_sigs) == 1 and dt == "bool":
            return False
        return dt in self.onnx_dtypes


Maximum = binary("maximum", "torch.maximum", ALL_DTYPES, onnx=ONNX_MINMAX, scalar=False)
Minimum = binary("minimum", "torch.minimum", ALL_DTYPES, onnx=ONNX_MINMAX, scalar=False)
Fmax = binary("fmax", "torch.fmax", ALL_DTYPES, scalar=False)
Fmin = binary("fmin", "torch.fmin", ALL_DTYPES, scalar=False)
Atan2 = binary("atan2", "torch.atan2", ALL_DTYPES, "float", ("float32", "float16"), scalar=False)
Hypot = binary("hypot", "torch.hypot", FLOAT_DTYPES, scalar=False)
Copysign = binary("copysign", "torch.copysign", ALL_DTYPES, "float", scalar=True,
                  scalar_dtypes=FLOAT_DTYPES)
@register_op
class Xlogy(BinarySpec):
    """torch.xlogy(x, y) = x * log(y). A scalar y is positive: for y <= 0 the result is -inf or
    NaN wherever x != 0, which no choice of values repairs."""

    name = "xlogy"
    fn = "torch.xlogy"
    in_dtypes = same_dtype_combos(ALL_DTYPES, 2)
    out_rule = "float"
    scalar_dtypes = FLOAT_DTYPES
    vulnerable = True

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        if len(in_sigs) == 1:
            self.choice_attr("scalar", [s for s in scalar_pool(in_sigs[0][0]) if float(s) > 0])
Nextafter = binary("nextafter", "torch.nextafter", FLOAT_DTYPES, scalar=False)
Heaviside = binary("heaviside", "torch.heaviside", ALL_DTYPES, scalar=False)
Logaddexp = binary("logaddexp", "torch.logaddexp", FLOAT_DTYPES, scalar=False)
Logaddexp2 = binary("logaddexp2", "torch.logaddexp2", FLOAT_DTYPES, scalar=False)
FloatPower = binary("float_power", "torch.float_power", ALL_DTYPES, "float64", vulnerable=True,
                    scalar_dtypes=FLOAT_DTYPES)
Gcd = binary("gcd", "torch.gcd", INT_DTYPES, scalar=False)
Lcm = binary("lcm", "torch.lcm", INT_DTYPES, scalar=False)
LogicalAnd = binary("logical_and", "torch.logical_and", ALL_DTYPES, "bool", ONNX_ALL, scalar=False)
LogicalOr = binary("logical_or", "torch.logical_or", ALL_DTYPES, "bool", ONNX_ALL, scalar=False)
LogicalXor = binary("logical_xor", "torch.logical_xor", ALL_DTYPES, "bool", ONNX_ALL, scalar=False)
BitwiseAnd = binary("bitwise_and", "torch.bitwise_and", INTS_AND_BOOL, operator="&")
BitwiseOr = binary("bitwise_or", "torch.bitwise_or", INTS_AND_BOOL, onnx=("bool",), operator="|")
BitwiseXor = binary("bitwise_xor", "torch.bitwise_xor", INTS_AND_BOOL, operator="^")


class ShiftSpec(BinarySpec):
    """Bit shifts on integers. PyTorch defines shifts by a negative amount or by >= the bit width
    (result 0, or -1 for a negative value shifted right); in C they are undefined, so a compiler
    that lowers to a plain C shift may differ there: value search should treat such shift amounts
    as a special case (`shift_amount_undefined`)."""

    in_dtypes = same_dtype_combos(INT_DTYPES, 2)
    shift_amount_undefined: ClassVar[bool] = True

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        if len(in_sigs) == 1:
            self.choice_attr("scalar", ("0", "1", "2", "3", "7"))

    def materialize(self, ins, a, in_shapes) -> str:
        # A tensor shift amount is wrapped into [0, bits): values cannot be constrained by the
        # solver, and a negative or too-wide amount is undefined behaviour in the compilers' C.
        if len(ins) == 2:
            bits = {"int8": 8, "uint8": 8, "int16": 16, "int32": 32, "int64": 64}[self.in_sigs[0][0]]
            ins = [ins[0], f"torch.remainder({ins[1]}, {bits})"]
        return super().materialize(ins, a, in_shapes)


@register_op
class BitwiseLeftShift(ShiftSpec):
    name = "bitwise_left_shift"
    fn = "torch.bitwise_left_shift"
    operator = "<<"
    reflected_dtypes = ()
    onnx_dtypes = INT_DTYPES


@register_op
class BitwiseRightShift(ShiftSpec):
    name = "bitwise_right_shift"
    fn = "torch.bitwise_right_shift"
    operator = ">>"
    reflected_dtypes = ()
    onnx_dtypes = ("uint8",)
    onnx_scalar_dtypes = INT_DTYPES


# -- ternary ops and ops mixing tensors and scalars ----------------------------------------------
class NaryBroadcastSpec(ElementwiseSpec):
    """An op whose tensor inputs broadcast together (where, clamp with tensor bounds, lerp, addcmul)."""

    def requires(self, inputs):
        cons, _ = broadcast_all([t.shape for t in inputs])
        return cons

    def type_transfer(self, inputs):
        _, shape = broadcast_all([t.shape for t in inputs])
        return [AbsTensor(self.out_dtype(inputs[self.data_index].dtype), shape)]

    @classmethod
    def deduct_inputs(cls, out: Sig, rng: random.Random) -> list[Sig] | None:
        arity = cls.pick_arity(rng)
        combos = [c for c in cls.dtype_combos(arity) if cls.out_dtype(c[cls.data_index]) == out[0]]
        if not combos:
            return None
        combo = rng.choice(combos)
        full = rng.randrange(arity)  # one input carries the full rank, the others may broadcast
        return [(d, out[1] if i == full else rng.randint(0, out[1])) for i, d in enumerate(combo)]


@register_op
class Where(NaryBroadcastSpec):
    """torch.where(cond, x, y) with three-way broadcasting, or with one branch a Python scalar."""

    name = "where"
    data_index = 1
    in_dtypes = [("bool", d, d) for d in ALL_DTYPES] + [("bool", d) for d in ALL_DTYPES]
    onnx_dtypes = ONNX_MINMAX

    @classmethod
    def pick_arity(cls, rng):
        return rng.choice((2, 3, 3))

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        if len(in_sigs) == 2:
            self.choice_attr("scalar", scalar_pool(in_sigs[1][0]))
            self.choice_attr("scalar_side", ("x", "y"))
        else:
            self.choice_attr("form", ("fn", "method"))

    def exports_onnx(self, a, in_sigs):
        # a bool Python scalar trips an internal assert in the TorchScript exporter
        return in_sigs[1][0] in self.onnx_dtypes and not (len(in_sigs) == 2 and in_sigs[1][0] == "bool")

    def materialize(self, ins, a, in_shapes) -> str:
        if len(ins) == 2:
            x, y = (a["scalar"], ins[1]) if a["scalar_side"] == "x" else (ins[1], a["scalar"])
            return f"torch.where({ins[0]}, {x}, {y})"
        if a.get("form") == "method":
            return f"{ins[1]}.where({ins[0]}, {ins[2]})"
        return f"torch.where({ins[0]}, {ins[1]}, {ins[2]})"


@register_op
class ClampTensor(NaryBroadcastSpec):
    """torch.clamp with tensor bounds (min only, max only, or both); bounds broadcast with x and
    the result takes the broadcast shape. Where min > max the result is max."""

    name = "clamp_tensor"
    in_dtypes = same_dtype_combos(ALL_DTYPES, 2) + same_dtype_combos(NO_BOOL, 3)
    onnx_dtypes = ONNX_MINMAX

    @classmethod
    def pick_arity(cls, rng):
        return rng.choice((2, 3))

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        if len(in_sigs) == 2:
            self.choice_attr("bound", ("min", "max"))
        self.choice_attr("fn", ("torch.clamp", "torch.clip"))

    def materialize(self, ins, a, in_shapes) -> str:
        if len(ins) == 2:
            return f"{a['fn']}({ins[0]}, {a['bound']}={ins[1]})"
        return f"{a['fn']}({ins[0]}, {ins[1]}, {ins[2]})"


@register_op
class Lerp(NaryBroadcastSpec):
    """torch.lerp(start, end, weight): weight a tensor (broadcasting) or a scalar, incl. outside [0, 1]."""

    name = "lerp"
    in_dtypes = same_dtype_combos(FLOAT_DTYPES, 2) + same_dtype_combos(FLOAT_DTYPES, 3)
    onnx_dtypes = ONNX_FLOATS

    @classmethod
    def pick_arity(cls, rng):
        return rng.choice((2, 3))

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        if len(in_sigs) == 2:
            self.choice_attr("weight", (0.0, 0.3, 0.5, 1.0, -0.5, 1.5))

    def materialize(self, ins, a, in_shapes) -> str:
        w = ins[2] if len(ins) == 3 else repr(a["weight"])
        return f"torch.lerp({ins[0]}, {ins[1]}, {w})"


@register_op
class Addcmul(NaryBroadcastSpec):
    """torch.addcmul(x, t1, t2, value=v) = x + v * t1 * t2, all three broadcasting."""

    name = "addcmul"
    arity = 3
    in_dtypes = same_dtype_combos(NO_BOOL, 3)
    onnx_dtypes = ONNX_NUMERIC

    def __init__(self, in_sigs, rng, uid):
        super().__init__(in_sigs, rng, uid)
        pool = (None, 1, 0.5, -2.0, 0) if is_float(in_sigs[0][0]) else (None, 1, 2, 0) if in_sigs[0][0] == "uint8" \
            else (None, 1, 2, -1, 0)
        self.choice_attr("value", pool)

    def materialize(self, ins, a, in_shapes) -> str:
        return f"torch.addcmul({ins[0]}, {ins[1]}, {ins[2]}{kwargs_text(a, ['value'])})"


@register_op
class Addcdiv(Addcmul):
    """torch.addcdiv(x, t1, t2, value=v) = x + v * t1 / t2; PyTorch rejects integer inputs."""

    name = "addcdiv"
    in_dtypes = same_dtype_combos(FLOAT_DTYPES, 3)
    onnx_dtypes = ()
    vulnerable = True

    def materialize(self, ins, a, in_shapes) -> str:
        return f"torch.addcdiv({ins[0]}, {ins[1]}, {ins[2]}{kwargs_text(a, ['value'])})"


@register_op
class Prelu(ElementwiseSpec):
    """F.prelu(x, weight): weight has 1 element or one per channel (dim 1 of x, when x.dim() >= 2)."""

    name = "prelu"
    arity = 2
    in_dtypes = same_dtype_combos(FLOAT_DTYPES, 2)
    in_ranks = (tuple(range(6)), (1,))
    weight_inputs = (1,)
    onnx_dtypes = ONNX_FLOATS

    def requires(self, inputs):
        x, w = inputs
        if x.rank >= 2:
            return [z3.Or(w.shape[0] == 1, w.shape[0] == x.shape[1])]
        return [w.shape[0] == 1]

    def type_transfer(self, inputs):
        return [AbsTensor(inputs[0].dtype, list(inputs[0].shape))]

    @classmethod
    def deduct_inputs(cls, out: Sig, rng: random.Random) -> list[Sig] | None:
        return [out, (out[0], 1)] if out[0] in FLOAT_DTYPES else None

    def materialize(self, ins, a, in_shapes) -> str:
        return f"F.prelu({ins[0]}, {ins[1]})"

"""What each operator does to values, one record per operator ("numerics").

An operator's numeric knowledge lives here and nowhere else: where it is finite (its domain and
poles), what it can return (its range), whether it is monotone and how it maps one value, where
it saturates, which integers and zeros it keeps, and which of its operand's elements its result
holds. Value facts (value_facts.py), the pointwise chain check (pointwise.py) and the safe-domain
losses of value search (oracle/safe_domain.py) all read these records.

Adding an operator is its spec plus, where its values are worth knowing, one `_op(...)` line
below; only an unusual operator needs a rule of its own in value_facts.py. Names are the specs'
names (`OpSpec.name`); for the elementwise math ops they are also torch's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Callable, NamedTuple

INF = math.inf
UP, DOWN = "increasing", "decreasing"  # monotone non-decreasing / non-increasing (where finite)
REARRANGES, SUBSET, HULL = "rearranges", "subset", "hull"  # how a result's elements relate to its operand's


class Interval(NamedTuple):
    """Where an operator is finite: from lo to hi, each end open or closed."""

    lo: float
    hi: float
    lo_open: bool
    hi_open: bool


@dataclass(frozen=True)
class OpNumerics:
    """One operator's numeric facts. Every field defaults to "nothing known"."""

    name: str
    # -- where it is finite (vulnerable unary ops) --
    domain: Interval | None = None
    # Points inside `domain` where it is not finite: "zero" (1 / x at 0) or "gamma" (0 and
    # every negative integer: lgamma, digamma).
    poles: str | None = None
    # An exp-like op that overflows beyond ln(dtype max) (sinh and cosh on either side).
    overflows: bool = False
    # -- what it returns --
    range: tuple[float, float] | None = None  # bounds on the result whatever the operand
    monotone: str | None = None  # UP or DOWN, where finite
    # The op on one float: the monotone map of bounds (clamped into its domain, with the limit
    # outside it), or the value at a known point for the others.
    fn: Callable[[float], float] | None = None
    strict: bool = False  # strictly monotone and continuous: an operand's limit maps to a limit
    # What it tends to at -inf and +inf, for ops that approach their bounds only asymptotically
    # (tanh of a uint8 is 1.0 only from ~9 on): such a bound is met only in saturation.
    asymptotes: tuple[float, float] | None = None
    integral_result: bool = False  # a whole number whatever the operand
    keeps_integral: bool = False  # a whole number of a whole number
    zero_at_zero: bool = False  # f(0) = 0: a zero the operand holds survives
    sign_keeping: bool = False  # <= 0 wherever its operand is: a value <= 0 held stays one
    # Float results exactly 0 only where a continuous operand is (the same elements, injective
    # ops): not exp, sigmoid, erfc (they underflow to 0), not log (log(1) is 0).
    keeps_continuous: bool = False
    # -- which elements it keeps --
    # REARRANGES: the same elements, maybe reordered, repeated or reshaped (every fact carries
    # over); SUBSET: some of them (bounds carry over, "holds a ..." facts do not); HULL: values
    # within the hull of the operands' (0 included for padded averages).
    elements: str | None = None
    index_at: tuple[int, ...] = ()  # outputs (past the first) that are indices
    identity: bool = False  # returns its operand's values unchanged, same shape and order
    # -- on special operands --
    class_test: float | None = None  # a class test's result on finite values (isinf: 0)
    self_value: float | None = None  # op(x, x) when it cancels to a constant (x - x is 0)
    self_divides: bool = False  # op(x, x) is 1 wherever finite (x / x)
    idempotent: bool = False  # op(x, x) is x (min, max, nextafter)
    divisor_at: int | None = None  # the operand it divides by (a 0 there is a pole)
    extremum: str | None = None  # "min" or "max": the elementwise min or max of its operands
    absorbing: float | None = None  # a scalar that decides every bit of the result (x | -1)
    # "power", "shrink" (hardshrink/softshrink), "product" (0 where an operand is all zeros),
    # "bitwise" (and, or, xor of integers): families whose rules value_facts.py shares.
    kind: str | None = None
    # Along a dim: "size_one" (a constant when the extent is 1; sharpened by the extent n),
    # "sized" (sharpened by the extent n only).
    along: str | None = None
    elementwise: bool = False  # an elementwise op of one tensor operand (besides those with fn)

    @property
    def saturating(self) -> bool:
        return self.asymptotes is not None

    @property
    def one_operand_elementwise(self) -> bool:
        """An elementwise op of one tensor operand (its scalar forms included): a value the
        operand holds maps to a point of the result."""
        return self.elementwise or self.fn is not None or self.monotone is not None or self.zero_at_zero


NUMERICS: dict[str, OpNumerics] = {}
_NOTHING = OpNumerics("")


def numerics(name: str) -> OpNumerics:
    """The record of operator `name` (one that says nothing where the table has none)."""
    return NUMERICS.get(name, _NOTHING)


def ops_where(**facts) -> frozenset[str]:
    """The names of the operators whose records have these field values (a callable value is a
    test of the field)."""
    def ok(r: OpNumerics) -> bool:
        return all(want(getattr(r, k)) if callable(want) else getattr(r, k) == want for k, want in facts.items())
    return frozenset(n for n, r in NUMERICS.items() if ok(r))


def present(v) -> bool:
    """A field test for `ops_where`: set at all."""
    return v is not None and v is not False and v != ()


def _op(name: str, **facts) -> None:
    if name in NUMERICS:
        raise ValueError(f"numerics for {name!r} given twice")
    unknown = set(facts) - {f.name for f in fields(OpNumerics)}
    if unknown:
        raise TypeError(f"{name}: no such numeric fact {sorted(unknown)}")
    NUMERICS[name] = OpNumerics(name, **facts)


# -- the functions of one float ---------------------------------------------------------------

def safe_at(f, x: float) -> float:
    try:
        return float(f(x))
    except (OverflowError, ValueError):
        return INF if x > 0 else -INF


def _erfinv(x: float) -> float:
    """The inverse of erf (by bisection; +-inf from +-1 on: where finite, |x| < 1)."""
    if x <= -1 or x >= 1:
        return math.copysign(INF, x)
    if abs(x) < 1e-8:  # erf(y) is 2 y / sqrt(pi) near 0
        return x * math.sqrt(math.pi) / 2
    lo, hi = (0.0, 6.0) if x > 0 else (-6.0, 0.0)  # erf(6) is 1 in float64
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.erf(mid) < x else (lo, mid)
    return (lo + hi) / 2


def _sigmoid(x: float) -> float:
    return 0.5 * (1.0 + math.tanh(x / 2))


def _i0(x: float) -> float:
    """The modified Bessel function I0 (its power series; inf where it overflows)."""
    if abs(x) > 700:
        return INF
    term = total = 1.0
    k = 0
    while term > 1e-17 * total:
        k += 1
        term *= (x / 2) ** 2 / (k * k)
        total += term
    return total


def _step(x: float) -> float:  # sgn of a uint8 is 0 or 1, not [-1, 1] (whose -1 would wrap to 255)
    return float((x > 0) - (x < 0))


DIGAMMA_1 = -0.5772156649015329  # digamma(1); digamma increases on (0, inf)
_SINC_MIN = -0.22  # sin(pi x) / (pi x) is -0.217234 at its least (x = +-1.4303); room for bfloat16 rounding
_POSITIVE = Interval(0, INF, True, False)
_UNIT_OPEN = Interval(-1, 1, True, True)
_UNIT_CLOSED = Interval(-1, 1, False, False)
_EVERYWHERE = Interval(-INF, INF, False, False)  # (but for the poles)

# -- the table ----------------------------------------------------------------------------------
# exponentials and logarithms
_op("exp", monotone=UP, fn=math.exp, strict=True, overflows=True)
_op("exp2", monotone=UP, fn=lambda x: 2.0 ** x, strict=True, overflows=True)
_op("expm1", monotone=UP, fn=math.expm1, strict=True, overflows=True, zero_at_zero=True, sign_keeping=True,
    keeps_continuous=True)
_op("log", domain=_POSITIVE, monotone=UP, fn=lambda x: math.log(x) if x > 0 else -INF, strict=True)
_op("log2", domain=_POSITIVE, monotone=UP, fn=lambda x: math.log2(x) if x > 0 else -INF, strict=True)
_op("log10", domain=_POSITIVE, monotone=UP, fn=lambda x: math.log10(x) if x > 0 else -INF, strict=True)
# (log1p(0) is 0, though no zero is claimed to survive it)
_op("log1p", domain=Interval(-1, INF, True, False), monotone=UP, fn=lambda x: math.log1p(x) if x > -1 else -INF,
    strict=True, keeps_continuous=True)
_op("sqrt", domain=Interval(0, INF, False, False), monotone=UP, fn=lambda x: math.sqrt(max(x, 0.0)),
    zero_at_zero=True)
_op("rsqrt", domain=_POSITIVE, monotone=DOWN, strict=True,
    fn=lambda x: 1.0 / math.sqrt(x) if x > 0 else INF)  # an operand reaching 0 or below leaves no upper bound
_op("reciprocal", domain=_EVERYWHERE, poles="zero")
# trigonometric and hyperbolic
_op("sin", range=(-1, 1), fn=math.sin, zero_at_zero=True, keeps_continuous=True)  # a float is 0 only at 0
_op("cos", range=(-1, 1), fn=math.cos, keeps_continuous=True)  # cos of a float is never 0
_op("tan", zero_at_zero=True, keeps_continuous=True)
_op("asin", domain=_UNIT_CLOSED, range=(-math.pi / 2, math.pi / 2), monotone=UP,
    fn=lambda x: math.asin(min(max(x, -1.0), 1.0)))
_op("acos", domain=_UNIT_CLOSED, range=(0, math.pi), monotone=DOWN, fn=lambda x: math.acos(min(max(x, -1.0), 1.0)))
_op("atan", monotone=UP, fn=math.atan, strict=True, asymptotes=(-math.pi / 2, math.pi / 2), zero_at_zero=True,
    sign_keeping=True, keeps_continuous=True)
_op("atan2", range=(-math.pi, math.pi))
_op("sinh", monotone=UP, fn=math.sinh, strict=True, overflows=True, zero_at_zero=True, sign_keeping=True,
    keeps_continuous=True)
_op("cosh", range=(1, INF), fn=math.cosh, overflows=True)
_op("tanh", monotone=UP, fn=math.tanh, strict=True, asymptotes=(-1.0, 1.0), zero_at_zero=True, sign_keeping=True,
    keeps_continuous=True)
_op("asinh", monotone=UP, fn=math.asinh, strict=True, zero_at_zero=True, sign_keeping=True, keeps_continuous=True)
_op("acosh", domain=Interval(1, INF, False, False), monotone=UP, fn=lambda x: math.acosh(max(x, 1.0)))
_op("atanh", domain=_UNIT_OPEN, monotone=UP, strict=True, zero_at_zero=True,
    fn=lambda x: math.atanh(x) if -1 < x < 1 else math.copysign(INF, x))
_op("deg2rad", monotone=UP, fn=math.radians, strict=True, zero_at_zero=True, sign_keeping=True,
    keeps_continuous=True)
_op("rad2deg", monotone=UP, fn=math.degrees, strict=True, zero_at_zero=True, sign_keeping=True,
    keeps_continuous=True)
_op("sinc", range=(_SINC_MIN, 1),  # 1 at 0 only; the least value is near x = 1.43
    fn=lambda x: 1.0 if x == 0 else math.sin(math.pi * x) / (math.pi * x))
# special functions
_op("erf", monotone=UP, fn=math.erf, strict=True, asymptotes=(-1.0, 1.0), zero_at_zero=True, sign_keeping=True,
    keeps_continuous=True)
_op("erfc", monotone=DOWN, fn=math.erfc, strict=True, asymptotes=(2.0, 0.0))
_op("erfinv", domain=_UNIT_OPEN, monotone=UP, fn=lambda x: _erfinv(x), strict=True, zero_at_zero=True)
_op("lgamma", domain=_EVERYWHERE, poles="gamma")
_op("digamma", domain=_EVERYWHERE, poles="gamma")
_op("i0", range=(1, INF), fn=lambda x: _i0(x))
_op("logit", domain=Interval(0, 1, True, True), elementwise=True)
_op("ndtri", domain=Interval(0, 1, True, True))  # (no spec: value search meets it in programs from elsewhere)
# activations
_op("sigmoid", monotone=UP, fn=_sigmoid, strict=True, asymptotes=(0.0, 1.0))
_op("logsigmoid", range=(-INF, 0), monotone=UP, fn=lambda x: -safe_at(lambda y: math.log1p(math.exp(-y)), x),
    strict=True, asymptotes=(-INF, 0.0))
_op("softsign", monotone=UP, fn=lambda x: math.copysign(1.0, x) if math.isinf(x) else x / (1 + abs(x)),
    strict=True, asymptotes=(-1.0, 1.0), zero_at_zero=True, sign_keeping=True, keeps_continuous=True)
_op("softplus", range=(0, INF))
_op("relu", monotone=UP, fn=lambda x: max(x, 0.0), keeps_integral=True, zero_at_zero=True, sign_keeping=True)
_op("relu6", range=(0, 6), keeps_integral=True, zero_at_zero=True, sign_keeping=True, elementwise=True)
_op("hardsigmoid", range=(0, 1), elementwise=True)
_op("hardtanh", keeps_integral=True, elementwise=True)
_op("hardswish", zero_at_zero=True, sign_keeping=True)
_op("silu", zero_at_zero=True, sign_keeping=True)
_op("gelu", zero_at_zero=True, sign_keeping=True)
_op("mish", zero_at_zero=True, sign_keeping=True)
_op("elu", zero_at_zero=True)
_op("celu", zero_at_zero=True)
_op("selu", zero_at_zero=True, sign_keeping=True)
_op("leaky_relu", zero_at_zero=True)
_op("rrelu", zero_at_zero=True)
_op("softshrink", zero_at_zero=True, sign_keeping=True, kind="shrink")
_op("hardshrink", zero_at_zero=True, sign_keeping=True, kind="shrink")
_op("tanhshrink", zero_at_zero=True, sign_keeping=True)
_op("threshold", elementwise=True)
# rounding, signs and magnitudes
_op("floor", monotone=UP, fn=math.floor, integral_result=True, zero_at_zero=True, sign_keeping=True)
_op("ceil", monotone=UP, fn=math.ceil, integral_result=True, zero_at_zero=True)
_op("trunc", monotone=UP, fn=math.trunc, integral_result=True, zero_at_zero=True, sign_keeping=True)
_op("round", zero_at_zero=True, sign_keeping=True)
_op("frac", range=(-1, 1), fn=lambda x: x - math.trunc(x))
_op("sgn", range=(-1, 1), monotone=UP, fn=_step, integral_result=True, zero_at_zero=True, sign_keeping=True)
_op("sign", range=(-1, 1), monotone=UP, fn=_step, integral_result=True, zero_at_zero=True, sign_keeping=True)
_op("abs", fn=abs, keeps_integral=True, zero_at_zero=True)
_op("square", range=(0, INF), fn=lambda x: x * x, keeps_integral=True, zero_at_zero=True)
_op("neg", monotone=DOWN, fn=lambda x: -x, strict=True, keeps_integral=True, zero_at_zero=True,
    keeps_continuous=True)
_op("positive", monotone=UP, fn=lambda x: x, strict=True, identity=True, keeps_integral=True, zero_at_zero=True,
    sign_keeping=True, keeps_continuous=True)
_op("clamp", keeps_integral=True, elementwise=True)
_op("copysign", keeps_continuous=True)
_op("nan_to_num", identity=True)  # value search makes every intermediate finite, where it changes nothing
_op("nextafter", idempotent=True)
_op("maximum", idempotent=True, extremum="max")
_op("minimum", idempotent=True, extremum="min")
_op("fmax", idempotent=True, extremum="max")
_op("fmin", idempotent=True, extremum="min")
_op("maximum_promote", extremum="max")
_op("minimum_promote", extremum="min")
# arithmetic
_op("add", elementwise=True)
_op("sub", self_value=0.0, elementwise=True)
_op("rsub", elementwise=True)
_op("mul", kind="product", keeps_continuous=True, elementwise=True)
_op("mul_promote", kind="product")
_op("div", divisor_at=1, self_divides=True, elementwise=True)
_op("div_promote", divisor_at=1, self_divides=True, elementwise=True)
_op("div_rounding", divisor_at=1, self_divides=True, elementwise=True)
_op("fmod", divisor_at=1, self_value=0.0, elementwise=True)  # (x % x is NaN at 0 only)
_op("remainder", divisor_at=1, self_value=0.0, elementwise=True)
_op("addcdiv", divisor_at=2)
_op("pow", kind="power", elementwise=True)
_op("float_power", kind="power", elementwise=True)
_op("pow_promote", kind="power")  # tensors of two dtypes
_op("float_scalar_promote", elementwise=True)
_op("xlogy", elementwise=True)
_op("bitwise_not", strict=True, integral_result=True, elementwise=True)
_op("bitwise_and", absorbing=0.0, kind="bitwise", elementwise=True)
_op("bitwise_or", absorbing=-1.0, kind="bitwise", elementwise=True)
_op("bitwise_xor", self_value=0.0, kind="bitwise", elementwise=True)
_op("logical_xor", self_value=0.0)
_op("mm", kind="product")
_op("bmm", kind="product")
_op("matmul", kind="product")
_op("einsum", kind="product")
_op("linear", kind="product")
# comparisons and class tests (on finite values: all value search accepts)
for _name, _v in (("eq", 1.0), ("ne", 0.0), ("gt", 0.0), ("ge", 1.0), ("lt", 0.0), ("le", 1.0), ("isclose", 1.0)):
    _op(_name, self_value=_v)
for _name, _v in (("isinf", 0.0), ("isnan", 0.0), ("isposinf", 0.0), ("isneginf", 0.0), ("isfinite", 1.0),
                  ("isreal", 1.0)):
    _op(_name, class_test=_v)
# layout: the same elements (dropout specs are eval mode only: the identity)
_op("contiguous", elements=REARRANGES, identity=True, zero_at_zero=True, keeps_continuous=True)
_op("dropout", elements=REARRANGES, identity=True, zero_at_zero=True, keeps_continuous=True)
for _name in ("flip", "roll", "permute", "transpose", "t", "movedim", "reshape", "view", "flatten", "unflatten",
              "squeeze", "unsqueeze", "expand", "expand_as", "repeat", "tile", "pixel_shuffle", "pixel_unshuffle"):
    _op(_name, elements=REARRANGES, keeps_continuous=True)
_op("type_as", keeps_continuous=True)
# some of the elements
for _name in ("narrow", "slice", "select", "chunk", "split", "tensor_split", "unbind", "diagonal", "gather",
              "index_select", "take_along_dim", "amax_amin", "aminmax"):
    _op(_name, elements=SUBSET, keeps_continuous=True)
for _name in ("max_pool1d", "max_pool2d", "max_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d"):
    _op(_name, elements=SUBSET, index_at=(1,), keeps_continuous=True)
for _name in ("sort", "max_min", "median", "kthvalue", "mode", "topk", "cummax_cummin"):
    _op(_name, elements=SUBSET, index_at=(1,), keeps_continuous=True, along="size_one")
# within the hull
for _name in ("cat", "stack", "mean", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
              "adaptive_avg_pool2d", "adaptive_avg_pool3d"):
    _op(_name, elements=HULL)
# along a dim
_op("softmax", range=(0, 1), along="size_one")
_op("log_softmax", range=(-INF, 0), along="size_one")
_op("count_nonzero", range=(0, INF), integral_result=True, along="size_one")
for _name in ("argmax_argmin", "std_var", "layer_norm"):
    _op(_name, along="size_one")
_op("logsumexp", along="sized")
_op("normalize", along="sized")
del _name, _v

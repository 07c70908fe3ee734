"""What the graph alone guarantees about a value ("facts"), and which vulnerable ops they doom.

Value search can repair a program only if some finite inputs make every intermediate finite. A
vulnerable op whose operand facts leave no such value (acosh(tanh(x)), lgamma(argsort(x)), log of
a training-mode batch_norm, rsqrt(x - x)) is non-finite whatever the inputs, so the generator asks
`hopeless(...)` before inserting one and does not build it.

What each operator does to values (its domain, range, monotone map, which elements it keeps) is
its record in numerics.py; the rules here read it. `value_facts` asks the rules that hold across
operators, then the operator's own (registered with `@_rule`, in the order they are asked), then
the elementwise unary map.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from nnforge.core.dtypes import INT_DTYPE_RANGES, int_search_range, is_float
from nnforge.generator.numerics import (
    DIGAMMA_1, DOWN, HULL, NUMERICS, REARRANGES, SUBSET, UP, numerics, ops_where, present, safe_at,
)
from nnforge.generator.spec import OpSpec
from nnforge.generator.specs.nn_arith import MAX_CHANNELS


# The operator facts these rules read, each a view of the records in numerics.py (one home per
# fact: adding an operator there is all most need).
# Values fixed by the graph alone, whatever the inputs and weights (as long as they are finite,
# which value search needs anyway): class tests, and ops applied to one value twice where the
# result cancels (x - x, x % x, x ^ x, x != x). A vulnerable op fed only fixed values (or a
# fixed divisor) is non-finite for every value or for none (rsqrt(isinf(x)), log(x - x)), so
# no value search can repair it; the generator does not build it.
_CLASS_TEST_VALUE = {n: r.class_test for n, r in NUMERICS.items() if r.class_test is not None}
_SELF_CANCELLED_VALUE = {n: r.self_value for n, r in NUMERICS.items() if r.self_value is not None}
_DIVISOR_AT = {n: r.divisor_at for n, r in NUMERICS.items() if r.divisor_at is not None}
# Ops that return one input's values unchanged (same shape, same order): the engine tracks such
# aliases, so that fmod(x, positive(x)) cancels like fmod(x, x).
_IDENTITY = ops_where(identity=True)
_SAME_OF_TWO = ops_where(idempotent=True)  # op(x, x) is x
_SELF_DIVIDING = ops_where(self_divides=True)  # x / x, x // x, trunc(x / x): 1 wherever finite
# (exp tends to 0 too, but reaches it by underflow well within float range: sqrt(-exp(x)) is kept.)
_ASYMPTOTES = {n: r.asymptotes for n, r in NUMERICS.items() if r.saturating}
_STRICT = ops_where(strict=True)
_RANGE = {n: r.range for n, r in NUMERICS.items() if r.range is not None}
_HULL = ops_where(elements=HULL)
_INDEX_AT_1 = ops_where(index_at=(1,))  # (argsort and argmax/argmin are the first and only)
_KEEPS_CONTINUOUS = ops_where(keeps_continuous=True)
_ELEMENTWISE_1 = frozenset(n for n, r in NUMERICS.items() if r.one_operand_elementwise)
_DOMAIN = {n: r.domain for n, r in NUMERICS.items() if r.domain is not None}
_POLE_AT_ZERO = ops_where(poles=present)  # 0 is a pole (and for lgamma/digamma every negative integer)
_OVERFLOWS = ops_where(overflows=True)
_ABSORBING = {n: r.absorbing for n, r in NUMERICS.items() if r.absorbing is not None}
_PRODUCTS = ops_where(kind="product")  # zero if an operand is all zeros
_POWERS = ops_where(kind="power")
_SHRINKS = ops_where(kind="shrink")
_BITWISE = ops_where(kind="bitwise")
ELEMENTWISE_MIN = ops_where(extremum="min")
ELEMENTWISE_MAX = ops_where(extremum="max")
# Ops along a dim (or dims) whose result is a constant when that dim has size 1: softmax is 1,
# log_softmax 0, and every index (argsort, argmax, the indices of max/median/sort/topk) is 0;
# and count_nonzero, which is then 0 or 1 (a reader that needs more grows the size too).
SIZE_ONE_OPS = ops_where(along="size_one")
# Ops along a dim whose facts the number of elements along it sharpens (SIZE_ONE_OPS, and
# logsumexp: at least lo + ln n over n elements, though over one it is x itself).
SIZED_OPS = ops_where(along=present)

# -- value facts ---------------------------------------------------------------------------
# What the graph alone guarantees about a value, for every evaluation where everything is finite
# (value search asks no more). A vulnerable op whose operand facts leave no finite value
# (acosh(tanh(x)), lgamma(argsort(x)), log(batch_norm(x)) in training mode, acos(layer_norm(x)))
# is non-finite whatever the inputs, so no search can repair it; the generator does not build it.
INF = math.inf


@dataclass(frozen=True)
class Facts:
    lo: float = -INF  # closed bounds on every element
    hi: float = INF
    integral: bool = False  # integer-valued
    zero: bool = False  # holds a 0 in practice: indices, triangles
    centered: bool = False  # mean zero over some dims: holds a value <= 0 (or is all zeros)
    unit: bool = False  # standardised with a small eps: holds a value with |x| >= ~1
    fixed: bool = False  # the same whatever the inputs (see _CLASS_TEST_VALUE)
    # The bound is a limit, reached only where the op saturates (tanh(x) is 1 for x > ~9 in
    # float32): a domain that only this bound touches (acosh(tanh(x))) is out of reach in practice.
    lo_limit: bool = False
    hi_limit: bool = False
    # Holds a value < 0 whatever the inputs: log_softmax over two or more elements (their
    # probabilities sum to 1, so one is at most 1/2 and its log at most -0.69).
    negative: bool = False
    # Holds this very value (or may, where the graph leaves it open): a constant pad border.
    holds: float | None = None
    # Holds a value <= 0 (the elementwise minimum with an operand that holds a 0)
    nonpos: bool = False
    # Every element is one of these (a few values, from a bool or a small integer range through
    # elementwise ops): asin of a bool is 0 or pi/2, never inside logit's (0, 1).
    values: tuple[float, ...] | None = None
    # Holds a value <= this: log_softmax over n elements (one probability is at most 1/n).
    at_most: float | None = None
    # A float whose elements are exactly 0 only by accident (a float input, and values that
    # injective ops and rearrangements make of it): heaviside(x, v) never takes v's values in
    # practice. False where an op may make exact zeros (relu, tril, masks, x - y).
    continuous: bool = False


def placeholder_facts(dtype: str) -> Facts:
    """Facts of a leaf value. Integer leaves are program inputs, which value search moves
    within `int_search_range` (core/dtypes.py)."""
    f = dtype_facts(dtype)
    if is_float(dtype):
        return replace(f, continuous=True)  # value search moves floats continuously, never onto 0
    if dtype == "bool":
        return f
    lo, hi = int_search_range(dtype)
    return Facts(lo, hi, integral=True)


_INT_RANGES = INT_DTYPE_RANGES


def _cast_to_int_facts(f: Facts, dtype: str) -> Facts | None:
    """A float -> integer cast truncates toward zero. int32/int64 conversions of values beyond
    the range give the most negative integer (x86) or saturate (ARM): a bound inside the range
    still holds on its side. Narrower targets wrap (through int32): only a range that fits."""
    rng = _INT_RANGES.get(dtype)
    if rng is None:
        return None
    t_lo = _trunc(f.lo)  # truncation comes first: logsigmoid's [-0.69, 0] is 0 as a uint8
    t_hi = _trunc(f.hi)
    lo_in, hi_in = rng[0] <= t_lo, t_hi <= rng[1]
    if dtype not in ("int32", "int64") and not (lo_in and hi_in):
        # wraps around: the bounds are lost, but an exact 0 is 0 in any integer dtype
        return Facts(float(rng[0]), float(rng[1]), integral=True, zero=f.zero) if f.zero else None
    lo = t_lo if lo_in else float(rng[0])
    hi = t_hi if hi_in else float(rng[1])
    return Facts(lo, hi, integral=True, zero=f.zero)  # an exact 0 stays 0


def _trunc(x: float) -> float:
    return x if math.isinf(x) else float(math.trunc(x))


def dtype_facts(dtype: str) -> Facts:
    if dtype == "bool":
        return Facts(0.0, 1.0, integral=True, values=(0.0, 1.0))
    if dtype == "uint8":
        return Facts(0.0, 255.0, integral=True)
    return Facts() if is_float(dtype) else Facts(integral=True)


_INDEX = Facts(0.0, INF, integral=True, zero=True)

def _standardised(op: OpSpec) -> tuple[bool, bool]:
    """(centered, unit) of a normalisation's output: mean zero (and unit variance when eps is
    small) over its groups, unless an affine bias (or weight) moves it."""
    a, k = op.attrs, len(op.in_sigs)
    small_eps = a.get("eps") is None or a.get("eps") <= 1e-3
    if op.name == "batch_norm" and a.get("training"):
        return a.get("affine") in ("none", "weight"), a.get("affine") == "none" and small_eps
    if op.name == "instance_norm" and a.get("use_input_stats") and a.get("layout") in ("x", "stats"):
        return True, small_eps
    if op.name in ("layer_norm", "group_norm") and k == 1:
        return True, small_eps
    if op.name == "rms_norm" and k == 1:
        return False, small_eps
    return False, False


def _number(v: Any, default: float) -> float:
    """A scalar attribute as a float (specs keep some as source text: "-1.5", "float('inf')")."""
    if v is None:
        return default
    if isinstance(v, str):
        v = {"True": 1.0, "False": 0.0, "float('inf')": INF, "float('-inf')": -INF}.get(v, v)
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x


def _clamp_fn(lo: float, hi: float):
    if math.isnan(lo) or math.isnan(hi):
        return None
    return lambda x: min(max(x, lo), hi)


def _bitwise_not_fn(op: OpSpec):
    """~x as arithmetic on the operand's dtype: logical not on bool, 255 - x on uint8, -x - 1 on
    signed integers (decreasing in each case)."""
    dt = op.in_sigs[0][0] if getattr(op, "in_sigs", None) else None
    if dt == "bool":
        return lambda x: 1.0 - x
    if dt == "uint8":
        return lambda x: 255.0 - x
    return lambda x: -x - 1.0


def _round_fn(d: int):
    """round(x, decimals=d): to a multiple of 10 ** -d (half to even), non-decreasing."""
    s = 10.0 ** abs(d)
    return (lambda x: round(x * s) / s) if d > 0 else (lambda x: round(x / s) * s)


def _logit_facts(op: OpSpec) -> Facts | None:
    """logit(x, eps) with 0 < eps: x clamped into [eps, 1 - eps] first, so the result is bounded;
    at eps = 1/2 it is 0. Above 1/2 the clamp turns over: x < eps gives eps, any other x 1 - eps."""
    eps = _number(op.attrs.get("eps"), math.nan)
    if not 0 < eps < 1 or _eps_lost_at_one(op):
        return None
    if eps == 0.5:
        return Facts(0.0, 0.0, integral=True, zero=True)
    v = abs(math.log((1 - eps) / eps)) * (1 + 1e-2)  # room for float16 rounding
    return Facts(-v, v)


def _shrink_fn(op: OpSpec):
    """hardshrink (x beyond +-lambd, else 0) and softshrink (x moved lambd towards 0, else 0):
    both non-decreasing for lambd >= 0 (hardshrink of a negative lambd is x itself)."""
    lambd = _number(op.attrs.get("lambd"), 0.5)
    if math.isnan(lambd):
        return None
    if op.name == "hardshrink":
        return lambda x: x if (x > lambd or x < -lambd) else 0.0
    if lambd < 0:
        return None
    return lambda x: x - lambd if x > lambd else x + lambd if x < -lambd else 0.0




def _unary_facts(op: OpSpec, f: Facts) -> Facts | None:
    """Facts of an elementwise unary result from its operand's, None when nothing is known."""
    name, a = op.name, op.attrs
    if name == "softplus" and not (_number(a.get("beta"), 1.0) > 0 and _number(a.get("threshold"), 20.0) >= 0):
        return None  # its linear branch returns x itself where beta * x > threshold: x < 0 too
    fn, dec = _monotone_maps(op)
    bounds = _unary_bounds(op, f, fn, dec)
    if bounds is None:
        return None
    lo, hi, lo_limit, hi_limit = bounds
    if name in _RANGE:
        lo2, hi2 = max(lo, _RANGE[name][0]), min(hi, _RANGE[name][1])
        lo_limit, hi_limit = lo_limit and lo2 == lo, hi_limit and hi2 == hi
        lo, hi = lo2, hi2
    r = numerics(name)
    rounds = name == "round" and (a.get("decimals") or 0) <= 0
    integral = r.integral_result or rounds or (f.integral and r.keeps_integral)
    symmetric = name in ("neg", "positive")  # a standardised value stays standardised
    # an element <= f.at_most stays <= fn(f.at_most) through a non-decreasing op
    at_most = safe_at(fn, f.at_most) if fn is not None and f.at_most is not None else None
    out = Facts(float(lo), float(hi), integral=integral, zero=f.zero and r.zero_at_zero, lo_limit=lo_limit,
                hi_limit=hi_limit, centered=symmetric and f.centered, unit=symmetric and f.unit,
                at_most=at_most if at_most is not None and math.isfinite(at_most) else None)
    mapped = _mapped_values(name, fn or dec, f)
    if mapped is not None:
        few = len(value_set(f) or ()) <= 5  # (a 0 among more values is not claimed to be met)
        out = replace(out, lo=min(mapped), hi=max(mapped), values=mapped, zero=0.0 in mapped and len(mapped) > 1 and few)
    return out


def _monotone_maps(op: OpSpec) -> tuple[Any, Any]:
    """(non-decreasing map, non-increasing map) of a unary op on one float, either or both None:
    the record's, or one its attributes decide (a clamp's bounds, a leaky relu's slope)."""
    if op.name in _MAP_OF_ATTRS:
        return _MAP_OF_ATTRS[op.name](op), None
    if op.name == "bitwise_not":
        return None, _bitwise_not_fn(op)
    r = numerics(op.name)
    return (r.fn if r.monotone == UP else None), (r.fn if r.monotone == DOWN else None)


def _round_map(op: OpSpec):
    d = op.attrs.get("decimals")
    if d in (None, 0):
        return round
    return _round_fn(d) if isinstance(d, int) else None


def _rrelu_map(op: OpSpec):
    """Eval mode: a leaky relu with the mean slope."""
    slope = (_number(op.attrs.get("lower"), 1 / 8) + _number(op.attrs.get("upper"), 1 / 3)) / 2
    return (lambda x: x if x >= 0 else slope * x) if slope >= 0 else None


def _leaky_relu_map(op: OpSpec):
    slope = _number(op.attrs.get("negative_slope"), 0.01)
    return (lambda x: x if x >= 0 else slope * x if slope else 0.0) if slope >= 0 else None  # non-decreasing


# Non-decreasing maps that an op's attributes decide.
_MAP_OF_ATTRS = {
    "hardtanh": lambda op: _clamp_fn(_number(op.attrs.get("min_val"), -1.0), _number(op.attrs.get("max_val"), 1.0)),
    "clamp": lambda op: _clamp_fn(_number(op.attrs.get("min"), -INF), _number(op.attrs.get("max"), INF)),
    "round": _round_map, "rrelu": _rrelu_map, "leaky_relu": _leaky_relu_map,
    **dict.fromkeys(_SHRINKS, _shrink_fn),
}


def _unary_bounds(op: OpSpec, f: Facts, fn: Any, dec: Any) -> tuple[float, float, bool, bool] | None:
    """(lo, hi, lo is a limit, hi is a limit) of a unary result on an operand with facts `f`."""
    name = op.name
    if fn is not None:
        return _increasing_bounds(op, f, fn)
    if dec is not None:
        lo, hi = safe_at(dec, f.hi), safe_at(dec, f.lo)
        return lo, hi, _limit(name, f.hi, f.hi_limit, lo, INF), _limit(name, f.lo, f.lo_limit, hi, -INF)
    if name == "digamma" and f.lo >= 0 and f.hi <= 1:  # softmax, sigmoid: digamma below digamma(1)
        return -INF, DIGAMMA_1, False, False
    if name == "abs":
        return (*_abs_bounds(f), False, False)
    if name == "threshold":
        return _threshold_bounds(op, f)
    if name in _RANGE:
        return (*_RANGE[name], False, False)
    return None


def _increasing_bounds(op: OpSpec, f: Facts, fn: Any) -> tuple[float, float, bool, bool]:
    name = op.name
    lo, hi = safe_at(fn, f.lo), safe_at(fn, f.hi)
    if name in _SHRINKS:  # a limit survives outside the dead zone only: values near it become 0
        lambd = _number(op.attrs.get("lambd"), 0.5)
        return lo, hi, f.lo_limit and abs(f.lo) > lambd, f.hi_limit and abs(f.hi) > lambd
    # floor(0 + tiny) is 0, attained; floor(1 - tiny) is 0 too: 1 stays out of reach (ceil mirrors)
    lo_limit = _limit(name, f.lo, f.lo_limit, lo, -INF) and name not in ("floor", "round", "trunc", "sgn", "sign")
    hi_limit = _limit(name, f.hi, f.hi_limit, hi, INF) and name not in ("ceil", "round", "trunc", "sgn", "sign")
    return lo, hi, lo_limit, hi_limit


def _threshold_bounds(op: OpSpec, f: Facts) -> tuple[float, float, bool, bool] | None:
    """threshold(x, th, value): x where x > th, else value."""
    th, val = _number(op.attrs["threshold"], math.nan), _number(op.attrs["value"], math.nan)
    if math.isnan(th) or math.isnan(val):
        return None
    if f.lo > th:
        return f.lo, f.hi, False, False
    if f.hi > th:
        return min(val, th), max(val, f.hi), False, False
    return val, val, False, False


_MAX_VALUES = 7  # relu6 of an integer: 0..6


def value_set(f: Facts) -> tuple[float, ...] | None:
    """The few values every element takes, if so few: the tracked set, or a short integer range."""
    if f.values is not None:
        return f.values
    if f.integral and math.isfinite(f.lo) and math.isfinite(f.hi) and f.hi - f.lo < _MAX_VALUES:
        return tuple(float(v) for v in range(int(f.lo), int(f.hi) + 1))
    return None


def _mapped_values(name: str, fn: Any, f: Facts) -> tuple[float, ...] | None:
    """The operand's value set through elementwise op `name` (values where it is non-finite
    dropped: value search needs it finite anyway); None when unknown."""
    points = value_set(f)
    fn = fn or numerics(name).fn
    if points is None and f.integral and name in _DOMAIN:  # the few integers inside the domain: acos(int)
        lo, hi = max(f.lo, _ceil(_DOMAIN[name][0])), min(f.hi, _floor(_DOMAIN[name][1]))
        if math.isfinite(lo) and math.isfinite(hi) and hi - lo < _MAX_VALUES:
            points = tuple(float(v) for v in range(int(lo), int(hi) + 1))
    if points is None or fn is None:
        return None
    if name in _DOMAIN:  # non-finite there (acos clamps its operand for bounds' sake only)
        points = [v for v in points if _in_domain(name, v)]
    try:
        out = sorted({float(fn(v)) for v in points})
    except (OverflowError, ValueError, ZeroDivisionError):
        return None
    out = tuple(v for v in out if math.isfinite(v))
    return out or None


def _limit(name: str, bound: float, was_limit: bool, result: float, infinite: float) -> bool:
    """Whether a result bound is a limit: the image of an operand's limit under a strictly
    monotone op (or left unchanged), or what a saturating op tends to (on an unbounded operand,
    or on a bounded one whose bound is far enough out that the result rounds to the asymptote)."""
    if not math.isfinite(result):
        return False
    if bound == infinite or result in _ASYMPTOTES.get(name, ()):
        return numerics(name).saturating
    return was_limit and (name in _STRICT or result == bound)


def _scalar_facts(op: OpSpec, f: Facts) -> Facts | None:
    """Facts of `x * s`, `x / s`, `fmod(x, s)`, `remainder(x, s)`, `xlogy(x, s)` for a scalar s
    (tensor first)."""
    a = op.attrs
    s = _number(a.get("scalar"), math.nan)
    if math.isnan(s) or math.isinf(s) or (a.get("form") == "rop" and op.name != "mul"):
        return None
    if op.name == "xlogy":  # x * log(s): a product with a constant (0 when s is 1)
        if s <= 0:
            return None
        s = math.log(s)
    integral = f.integral and s.is_integer()
    if op.name in ("mul", "xlogy"):
        if s == 0:
            return Facts(0.0, 0.0, integral=True)
        lo, hi = sorted((f.lo * s, f.hi * s))
        return Facts(lo, hi, integral, zero=f.zero)
    if op.name in ("div", "div_promote") and s != 0:
        lo, hi = sorted((f.lo / s, f.hi / s))
        return Facts(lo, hi, zero=f.zero)
    if op.name in ("fmod", "remainder") and s != 0:
        m = abs(s) - 1 if integral else abs(s)  # |result| < |s|
        if op.name == "fmod":  # the dividend's sign, and |fmod(x, s)| <= |x|
            # fmod is exact: |result| < |s| strictly, so +-|s| is a bound never met (acosh(fmod(x, -1)))
            if -abs(s) < f.lo and f.hi < abs(s):  # x itself
                return Facts(f.lo, f.hi, f.integral, lo_limit=f.lo_limit, hi_limit=f.hi_limit)
            lo = max(f.lo, -m) if f.lo < 0 else 0.0
            hi = min(f.hi, m) if f.hi > 0 else 0.0
            lo_limit = lo < 0 and ((lo == -m and not integral) or (lo == f.lo and f.lo_limit))
            hi_limit = hi > 0 and ((hi == m and not integral) or (hi == f.hi and f.hi_limit))
            return Facts(lo, hi, integral, lo_limit=lo_limit, hi_limit=hi_limit)
        # remainder takes the divisor's sign; a dividend of that sign too gives fmod(x, s), which is
        # exact: |result| < |s| strictly, so +-|s| is never met. (A dividend of the other sign may
        # round up to it: remainder(-1e-9, 1.0) is 1.0.)
        same_sign = f.lo >= 0 if s > 0 else f.hi <= 0
        if same_sign and -abs(s) < f.lo and f.hi < abs(s):  # x itself
            return Facts(f.lo, f.hi, f.integral, lo_limit=f.lo_limit, hi_limit=f.hi_limit)
        limit = same_sign and not integral
        return Facts(0.0, m, integral, hi_limit=limit) if s > 0 else Facts(-m, 0.0, integral, lo_limit=limit)
    return None


def _shift_facts(op: OpSpec, f: Facts, dtype: str) -> Facts | None:
    """Bounds of x + s, x - s (alpha-scaled), s + x, s - x and rsub's s - alpha * x. Integer
    results that may leave their dtype wrap around (uint8 x - 3): nothing known then."""
    a = op.attrs
    s, alpha = _number(a.get("scalar"), math.nan), _number(a.get("alpha"), 1.0)
    if not (math.isfinite(s) and math.isfinite(alpha)):
        return None
    rop = a.get("form") == "rop"
    if op.name == "add":
        k, c = 1.0, s if rop else alpha * s
    elif op.name == "sub":
        k, c = (-1.0, s) if rop else (1.0, -alpha * s)
    else:  # rsub
        k, c = -alpha, s
    lo, hi = (c, c) if k == 0 else sorted((c + k * f.lo, c + k * f.hi))
    integral = f.integral and float(c).is_integer() and float(k).is_integer()
    return _in_dtype(lo, hi, integral, dtype)


def _sum_of_two(op: OpSpec, ins: list[Facts], dtype: str) -> Facts | None:
    """Bounds of x + alpha * y and x - alpha * y (an alpha of 0 leaves x: add(x, y, alpha=0));
    integer results that may leave their dtype wrap around: nothing known then."""
    alpha = _number(op.attrs.get("alpha"), 1.0) * (-1.0 if op.name == "sub" else 1.0)
    x, y = ins
    if not math.isfinite(alpha):
        return None
    if alpha == 0:
        ylo = yhi = 0.0
    else:
        ylo, yhi = sorted((alpha * y.lo, alpha * y.hi))
    integral = x.integral and (alpha == 0 or (y.integral and float(alpha).is_integer()))
    return _in_dtype(x.lo + ylo, x.hi + yhi, integral, dtype)


def _in_dtype(lo: float, hi: float, integral: bool, dtype: str) -> Facts | None:
    """Facts(lo, hi) of an add/sub result, or None where the bounds are unusable (inf - inf) or an
    integer result may leave its dtype, where it wraps around (uint8 x - 3)."""
    if math.isnan(lo) or math.isnan(hi):
        return None
    rng = _INT_RANGES.get(dtype)
    if not is_float(dtype) and (rng is None or lo < rng[0] or hi > rng[1]):
        return None
    return Facts(lo, hi, integral=integral)


@dataclass(frozen=True)
class _ScalarOp:
    """An integer-tensor-with-float-scalar op (float_scalar_promote) seen as the op it applies."""

    name: str
    attrs: Mapping[str, Any]


_PROMOTED_AS = {"*": "mul", "/": "div", "remainder": "remainder", "fmod": "fmod"}


def _sum_facts(f: Facts) -> Facts:
    """A sum keeps the sign of same-signed terms (and all-zero terms sum to zero)."""
    return Facts(0.0 if f.lo >= 0 else -INF, 0.0 if f.hi <= 0 else INF, f.integral)


def _right_shift_facts(op: OpSpec, f: Facts) -> Facts:
    """x >> k is floor(x / 2 ** k): by a scalar k, the bounds shifted; by a tensor (wrapped into
    [0, bits)), anywhere from x itself to 0 (or -1 for negative x)."""
    k = _number(op.attrs.get("scalar"), math.nan) if "scalar" in op.attrs else math.nan
    if not math.isnan(k) and k >= 0:
        return Facts(_floor(f.lo / 2 ** k), _floor(f.hi / 2 ** k), integral=True)
    return Facts(f.lo if f.lo < 0 else 0.0, f.hi if f.hi >= 0 else -1.0, integral=True)


def _holds_nonpositive(g: Facts) -> bool:
    return g.nonpos or g.centered or g.negative or g.zero or (g.holds is not None and g.holds <= 0)


def _abs_bounds(f: Facts) -> tuple[float, float]:
    """Bounds on |x| for x within f's."""
    return (f.lo, f.hi) if f.lo >= 0 else (-f.hi, -f.lo) if f.hi <= 0 else (0.0, max(-f.lo, f.hi))


def _norm_facts(order: Any, g: Facts) -> Facts:
    """A vector norm is never negative; the max-norms (order +-inf) are the magnitude of one
    element (a whole number for whole operands: logit of one is hopeless), order 0 counts."""
    if isinstance(order, (int, float)) and abs(order) == INF:
        lo, hi = _abs_bounds(g)
        return Facts(lo, hi, integral=g.integral)
    return Facts(0.0, INF, integral=order == 0)


def _hull(fs: list[Facts], with_zero: bool = False, averaged: bool = False) -> Facts:
    lo, hi = min(f.lo for f in fs), max(f.hi for f in fs)
    if with_zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    return Facts(lo, hi, integral=not averaged and all(f.integral for f in fs))  # a mean of integers is not one


def same_values_as(op: OpSpec, inputs: list[int]) -> int | None:
    """The input position whose values `op`'s (only) output repeats exactly, in the same shape and
    order, or None. `inputs` are the operands' canonical ids (aliases resolved)."""
    name, a, sigs = op.name, op.attrs, op.in_sigs
    if name in _IDENTITY or (name == "pad" and a.get("k") == 0):  # F.pad(x, ()) pads nothing
        return 0
    if name.startswith("to_") and sigs[0][0] == name[3:]:  # a cast to the dtype it already has
        return 0
    if name == "type_as" and sigs[0][0] == sigs[1][0]:
        return 0
    if name in _SAME_OF_TWO and len(inputs) == 2 and inputs[0] == inputs[1]:
        return 0
    if _keeps_layout(op):
        return 0
    return None


def _keeps_layout(op: OpSpec) -> bool:
    """A layout op that leaves shape and order as they are: t() or a transpose of a 1-D value,
    flatten over a single dim, the identity permutation, a reshape of a 1-D value to 1-D."""
    name, a, rank = op.name, op.attrs, op.in_sigs[0][1] if op.in_sigs else -1
    if name == "t":
        return rank <= 1
    if name == "flatten":
        return rank >= 1 and _wrapped(a.get("start_dim"), rank) == _wrapped(a.get("end_dim"), rank) is not None
    if name == "transpose":
        return rank <= 1 or _wrapped(a.get("dim0"), rank) == _wrapped(a.get("dim1"), rank) is not None
    if name == "permute":
        dims = a.get("dims")
        return isinstance(dims, tuple) and [_wrapped(d, rank) for d in dims] == list(range(rank))
    if name in ("reshape", "view") and a.get("mode") != "split":  # 1-D to 1-D: the same numel, the same shape
        return rank == 1 and sum(1 for k in a if k.startswith("size")) == 1
    return False


def _wrapped(d: Any, rank: int) -> int | None:
    if not isinstance(d, int) or isinstance(d, bool):
        return None
    return d + max(rank, 1) if d < 0 else d


def is_index_output(op: OpSpec, pos: int) -> bool:
    """Whether output `pos` of `op` holds indices (argsort, argmax, the second result of sort or max)."""
    name = op.name
    return (pos == 1 and name in _INDEX_AT_1) or name == "argmax_argmin" or (
        name == "sort" and op.attrs.get("fn") == "argsort")


# -- facts known once shapes are solved ------------------------------------------------------


@dataclass(frozen=True)
class Concrete:
    """An op instance's input shapes and attribute values once solved; before solving, the same
    with the solver's terms in it (a rank-0 input, or a dim that is the literal 1 of a keepdim
    reduction, is size one already)."""

    in_shapes: tuple[tuple[Any, ...], ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)


def _is_one(d: Any) -> bool:
    return isinstance(d, int) and d == 1


def along_axes(op: OpSpec, attrs: Mapping[str, Any]) -> list[int] | None:
    """The axes of input 0 that a SIZE_ONE_OPS op works along, from concrete attributes (a rank-0
    input has none: its one element is the whole extent); None for other ops."""
    if op.name not in SIZED_OPS:
        return None
    rank = op.in_sigs[0][1]
    if rank == 0:
        return []
    if op.name == "topk" and attrs.get("default_dim"):
        return [rank - 1]
    if op.name == "layer_norm":  # over its last k dims
        k = attrs.get("k")
        return list(range(rank - k, rank)) if isinstance(k, int) else None
    dim = attrs.get("dim")
    if dim is None:
        return list(range(rank))
    dims = (dim,) if isinstance(dim, int) else dim
    if not isinstance(dims, tuple) or not all(isinstance(d, int) for d in dims):
        return None  # a dim the solver has not chosen yet
    return sorted({d + rank if d < 0 else d for d in dims})


def _size_one_facts(op: OpSpec, pos: int, concrete: Concrete, ins: list[Facts]) -> Facts | None:
    """Facts of a SIZE_ONE_OPS result that the sizes it works along decide, or None: a constant
    along extents of size 1 (a count of 0 or 1 for count_nonzero); along n > 1 elements, what n
    alone guarantees (see `_sized_facts`)."""
    n = extent(op, concrete)
    if n is None:
        return None
    if n != 1:
        return _sized_facts(op, pos, n, ins)
    if op.name == "softmax":
        return Facts(1.0, 1.0, integral=True, fixed=True)
    if op.name == "log_softmax" or is_index_output(op, pos):
        return Facts(0.0, 0.0, integral=True, zero=True, fixed=True)
    if op.name == "std_var" and pos == 0:  # the spread of one element (the spec keeps correction 0 there)
        return Facts(0.0, 0.0, integral=True, zero=True, fixed=True)
    if op.name == "layer_norm" and concrete.attrs.get("affine") != "bias" and len(op.in_sigs) < 3:
        return Facts(0.0, 0.0, integral=True, zero=True, fixed=True)  # x - mean(x) over one element, scaled
    if op.name == "count_nonzero":
        return Facts(0.0, 1.0, integral=True)
    return None


def extent(op: OpSpec, concrete: Concrete) -> int | None:
    """How many elements a SIZE_ONE_OPS op works along, where the sizes are known (solved, or
    literal before solving); None otherwise."""
    axes = along_axes(op, concrete.attrs)
    if axes is None:
        return None
    sizes = [concrete.in_shapes[0][ax] for ax in axes]
    if not all(isinstance(d, int) for d in sizes):
        return None
    return math.prod(sizes)


def shrinks_help(op: OpSpec, attrs: Mapping[str, Any], shape: tuple[int, ...]) -> bool:
    """Whether `op` (softmax, log_softmax, logsumexp, a permutation of indices) works along 3 or
    more elements at solved sizes, where what it holds (a probability <= 1/n, the index n - 1) or
    its least value (lo + ln n) grows out of reach of some domains as n grows; or a logsumexp
    along 2 (over one element it is its operand: asin(logsumexp(sigmoid(x))) needs that), or a
    normalize (over one element it is sign(x): acosh(normalize(x)) needs that)).
    (Over one element the others are constants, which no vulnerable reader is given.)"""
    if op.name not in ("softmax", "log_softmax", "logsumexp", "normalize") and not any(
            _is_permutation(op, pos) for pos in (0, 1)):
        return False
    n = extent(op, Concrete((shape,), attrs))
    return n is not None and (n >= 3 or (n == 2 and op.name in ("logsumexp", "normalize")))


def triangle_drops(op: OpSpec, concrete: Concrete | None) -> bool:
    """Whether tril/triu zeroes some element, at solved sizes and diagonal (before solving the
    diagonal is open: a triangle may keep the whole matrix, as a large diagonal or a single
    column does, so nothing is claimed)."""
    if concrete is None or op.name != "tril_triu":
        return False
    d, shape = concrete.attrs.get("diagonal"), concrete.in_shapes[0]
    if not isinstance(d, int) or not all(isinstance(s, int) for s in shape) or math.prod(shape) == 0:
        return False
    rows, cols = shape[-2], shape[-1]
    if concrete.attrs.get("fn") == "tril":  # keeps j - i <= d: drops (0, cols - 1) if cols - 1 > d
        return cols - 1 > d
    return d > -(rows - 1)  # triu keeps j - i >= d: drops (rows - 1, 0) if -(rows - 1) < d


def _is_permutation(op: OpSpec, pos: int) -> bool:
    """Indices that are a permutation along the dim: argsort, and sort's second result."""
    return op.name == "sort" and (pos == 1 or op.attrs.get("fn") == "argsort")


def _sized_facts(op: OpSpec, pos: int, n: int, ins: list[Facts] = ()) -> Facts | None:
    """What n >= 2 elements along the dim guarantee: probabilities sum to 1, so softmax holds one
    <= 1/n (log_softmax one <= -ln n) and reaches 1 (0) only in saturation; a permutation of
    indices holds n - 1; any index is below n; a logsumexp is at least lo + ln n (all elements
    at lo) and at most hi + ln n."""
    if op.name == "count_nonzero" and n >= 0:
        return Facts(0.0, float(n), integral=True)
    if n < 2:
        return None
    if op.name == "normalize" and ins:  # the least |x_i| is at most n ** (-1 / p) of the p-norm
        p = _number(op.attrs.get("p"), 2.0)
        f = _normalize_facts(op, ins[0])
        return replace(f, at_most=n ** (-1.0 / p)) if 0 < p < INF else f
    if op.name == "logsumexp" and ins:
        g, ln_n = ins[0], math.log(n)
        lo = g.lo + ln_n - 1e-6 * (1 + abs(g.lo + ln_n)) if g.lo > -INF else -INF  # rounding room
        hi = g.hi + ln_n + 1e-6 * (1 + abs(g.hi + ln_n)) if g.hi < INF else INF
        return Facts(lo, hi) if lo > -INF or hi < INF else None
    if op.name == "softmax":
        return Facts(0.0, 1.0, hi_limit=True, at_most=1.0 / n)
    if op.name == "log_softmax":
        return Facts(-INF, 0.0, hi_limit=True, negative=True, at_most=-math.log(n))
    if _is_permutation(op, pos):
        values = tuple(float(v) for v in range(n)) if n <= _MAX_VALUES else None
        return Facts(0.0, float(n - 1), integral=True, zero=True, holds=float(n - 1), values=values)
    if is_index_output(op, pos):
        return Facts(0.0, float(n - 1), integral=True, zero=True)
    return None


def _where_branch(op: OpSpec, ins: list[Facts], taken: bool) -> Facts | None:
    """where(cond, x, y) with a condition that is all True (`taken`) or all False: the facts of
    the branch it picks (where(isneginf(v), w, 0.0) is 0 wherever v is finite)."""
    if len(ins) == 3:
        return ins[1] if taken else ins[2]
    scalar_side = op.attrs.get("scalar_side")
    if (scalar_side == "x") == taken:  # the Python scalar is picked
        v = _number(op.attrs.get("scalar"), math.nan)
        return Facts(v, v, integral=float(v).is_integer(), zero=v == 0) if math.isfinite(v) else None
    return ins[1] if len(ins) == 2 else None


def value_facts(op: OpSpec, ins: list[Facts], out_dtypes: list[str], fixed: bool, *,
                same_operands: bool = False, concrete: Concrete | None = None) -> list[Facts]:
    """Facts of each output of `op` from its inputs' facts (Facts() where nothing is known).

    `same_operands`: the two operands are one value (see `same_values_as`). `concrete`: the
    solved shapes and attributes, which make a few more results constant (`SIZE_ONE_OPS`).
    """
    outs: list[Facts] = []
    for pos, dt in enumerate(out_dtypes):
        c = _Out(op, pos, ins, dt, len(out_dtypes), same_operands, concrete)
        sized = _size_one_facts(op, pos, concrete, ins) if concrete is not None else None
        f = sized if sized is not None else _derived(c)
        outs.append(_finished(c, f, fixed, constant=sized is not None and sized.fixed))
    return outs


@dataclass(frozen=True)
class _Out:
    """One output of an op instance, as a facts rule sees it."""

    op: OpSpec
    pos: int
    ins: list[Facts]
    dt: str  # its dtype
    n_out: int
    same: bool  # the two operands are one value
    concrete: Concrete | None

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def attrs(self) -> Mapping[str, Any]:
        return self.op.attrs


# A rule gives the facts of one output (None: nothing known), or _PASS where it does not apply,
# and the next rule registered for the op is asked. Rules are registered in the order they are
# asked; what no rule answers, an op of one operand gets from `_unary_facts`.
_PASS = object()
Rule = Callable[[_Out], Any]
_RULES: dict[str, list[Rule]] = {}


def _rule(*names: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for n in names:
            _RULES.setdefault(n, []).append(fn)
        return fn

    return register


def _derived(c: _Out) -> Facts | None:
    """What the rules make of one output: the general ones first (read from the numerics
    records), then the op's own, then the elementwise unary map."""
    f = _general(c)
    if f is not _PASS:
        return f
    for rule in _RULES.get(c.name, ()):
        f = rule(c)
        if f is not _PASS:
            return f
    return _unary_facts(c.op, c.ins[0]) if len(c.ins) == 1 else None


def _general(c: _Out) -> Any:
    """Rules that hold across ops: x - x, x / x, indices, class tests, casts, the elements an
    op keeps."""
    op, ins, r = c.op, c.ins, numerics(c.name)
    if c.same and _self_cancels(op):
        v = r.self_value
        return Facts(v, v, integral=True, zero=v == 0)
    if c.same and _self_divides(op):
        return Facts(1.0, 1.0, integral=True, values=(1.0,))  # x / x: 1 wherever finite (NaN at 0)
    if is_index_output(op, c.pos):
        return _INDEX
    if r.class_test is not None:  # on finite values (all value search accepts)
        v = r.class_test
        return Facts(v, v, integral=True, zero=v == 0)
    if not ins:
        return None
    if c.name.startswith("to_") or c.name == "type_as":
        return ins[0] if is_float(c.dt) else None if c.dt == "bool" else _cast_to_int_facts(ins[0], c.dt)
    if r.elements == REARRANGES:
        return ins[0]
    if r.elements == SUBSET:
        return _subset_facts(op, c.pos, ins[0])
    return _PASS


@_rule("frac")
def _frac_of_whole(c: _Out) -> Any:
    return Facts(0.0, 0.0, integral=True, zero=True) if c.ins and c.ins[0].integral else _PASS  # x - trunc(x)


@_rule("signbit")
def _signbit(c: _Out) -> Any:
    g = c.ins[0] if c.ins else None
    if g is None or not (g.lo > 0 or g.hi < 0):  # (-0.0 has it set: no 0 here)
        return _PASS
    v = float(g.hi < 0)
    return Facts(v, v, integral=True, zero=v == 0)


@_rule("nan_to_num")
def _unchanged(c: _Out) -> Any:
    return c.ins[0]  # (value search makes every intermediate finite, where it changes nothing)


@_rule("atan2")
def _atan2(c: _Out) -> Any:
    if len(c.ins) != 2:
        return _PASS
    return _atan2_of_itself(c.ins[0]) if c.same else _atan2_facts(*c.ins)


@_rule("heaviside")
def _heaviside(c: _Out) -> Any:
    return _heaviside_facts(*c.ins) if len(c.ins) == 2 else _PASS


@_rule("addcmul", "addcdiv")
def _add_nothing(c: _Out) -> Any:
    return c.ins[0] if _number(c.attrs.get("value"), 1.0) == 0 else _PASS  # x + 0 * (t1 * t2): x wherever finite


@_rule("addcmul")
def _addcmul(c: _Out) -> Any:
    return _addcmul_facts(c.op, c.ins, c.same, c.dt) if len(c.ins) == 3 else _PASS


@_rule("pairwise_distance")
def _pairwise_distance(c: _Out) -> Any:
    eps = _number(c.attrs.get("eps"), 1e-6)
    return Facts(0.0, 0.0, integral=True, zero=True) if c.same and eps == 0 else Facts(0.0, INF)


@_rule("std_var")
def _spread(c: _Out) -> Any:
    if c.pos != 0:
        return _PASS
    if c.ins[0].lo == c.ins[0].hi:
        return Facts(0.0, 0.0, integral=True, zero=True)  # the spread of one repeated value
    return Facts(0.0, INF)


@_rule(*_SAME_OF_TWO)
def _of_itself(c: _Out) -> Any:
    return c.ins[0] if c.same else _PASS  # min(x, x) is x, and so is nextafter(x, x)


@_rule("addmm", "baddbmm")
def _input_only(c: _Out) -> Any:
    if _number(c.attrs.get("alpha"), 1.0) != 0:
        return _PASS
    beta = _number(c.attrs.get("beta"), 1.0)  # beta * input + 0 * (m1 @ m2); beta 0 ignores the input
    if beta == 0:
        return Facts(0.0, 0.0, integral=True, zero=True)
    return _scalar_facts(_ScalarOp("mul", {"scalar": beta}), c.ins[0])


@_rule("lp_pool1d", "lp_pool2d")
def _lp_pool(c: _Out) -> Any:
    if not (c.ins and c.ins[0].lo >= 0):
        return _PASS
    return Facts(c.ins[0].lo, INF)  # (sum x ** p) ** (1 / p) is at least the window's largest x


@_rule(*(ELEMENTWISE_MIN | ELEMENTWISE_MAX))
def _min_max(c: _Out) -> Any:
    return _min_max_facts(c.name in ELEMENTWISE_MIN, c.ins)  # elementwise min/max: tighter than the hull


@_rule("gcd")
def _gcd(c: _Out) -> Any:
    ins = c.ins
    if not (len(ins) == 2 and min(ins[0].lo, ins[1].lo) > _INT_RANGES.get(c.dt, (-INF,))[0]):
        return _PASS
    m = max(abs(ins[0].lo), abs(ins[0].hi), abs(ins[1].lo), abs(ins[1].hi))
    return Facts(0.0, m, integral=True)  # never negative (but gcd(-128, 0) is -128 in int8)


@_rule("bitwise_right_shift")
def _right_shift(c: _Out) -> Any:
    return _right_shift_facts(c.op, c.ins[0])


@_rule("avg_pool1d", "avg_pool2d", "avg_pool3d")
def _window_sum(c: _Out) -> Any:
    if c.attrs.get("divisor_override") is None:
        return _PASS
    return _sum_facts(c.ins[0])  # a window sum divided by a fixed number (1, say): the sign is all that is left


@_rule("where")
def _where(c: _Out) -> Any:
    g = c.ins[0]
    if not (g.lo == g.hi and g.lo in (0.0, 1.0)):
        return _PASS
    return _where_branch(c.op, c.ins, taken=g.lo == 1.0)


@_rule("vector_norm")
def _vector_norm(c: _Out) -> Any:
    return _norm_facts(c.attrs.get("ord"), c.ins[0])


@_rule("interpolate")
def _interpolate(c: _Out) -> Any:
    mode = c.attrs.get("mode")
    if mode == "bicubic":
        return _PASS
    return _hull(c.ins[:1], averaged=not str(mode).startswith("nearest"))  # weights >= 0 that sum to 1


@_rule(*_HULL)
def _within_hull(c: _Out) -> Any:
    ins, name = c.ins, c.name
    f = _hull(ins, with_zero=name.startswith("avg_pool"), averaged=name not in ("cat", "stack"))
    if name in ("cat", "stack"):
        f = Facts(f.lo, f.hi, f.integral, zero=any(g.zero for g in ins),
                  centered=any(g.centered for g in ins), unit=any(g.unit for g in ins))
    return f


@_rule(*_PRODUCTS)
def _product_of_zeros(c: _Out) -> Any:
    if not any(g.lo == g.hi == 0 for g in c.ins) or (c.name == "linear" and len(c.ins) > 2):
        return _PASS
    return Facts(0.0, 0.0, integral=True)


@_rule(*_ABSORBING)
def _absorbed(c: _Out) -> Any:
    v = _ABSORBING[c.name]  # x | -1 is -1, x & 0 is 0, whatever x
    if len(c.ins) != 1 or _number(c.attrs.get("scalar"), math.nan) != v:
        return _PASS
    return Facts(v, v, integral=True, zero=v == 0)


@_rule("mul", "div", "div_promote", "fmod", "remainder", "xlogy")
def _by_scalar(c: _Out) -> Any:
    if len(c.ins) != 1 or "scalar" not in c.attrs:
        return _PASS
    f = _scalar_facts(c.op, c.ins[0])
    if f is not None and c.name in ("fmod", "remainder") and c.ins[0].zero and c.attrs.get("form") != "rop":
        f = replace(f, zero=True)  # 0 % s is 0
    return f


@_rule("fmod", "remainder")
def _modulo(c: _Out) -> Any:
    return _modulo_facts(c.name, *c.ins) if len(c.ins) == 2 else _PASS


@_rule(*_BITWISE)
def _bitwise(c: _Out) -> Any:
    if c.dt not in _INT_RANGES or not (len(c.ins) == 2 or "scalar" in c.attrs):
        return _PASS
    return _bitwise_facts(c.op, c.ins)


@_rule("float_scalar_promote")
def _promoted(c: _Out) -> Any:
    a = c.attrs
    if a.get("op") not in _PROMOTED_AS:
        return _PASS
    as_op = _ScalarOp(_PROMOTED_AS[a["op"]], {"scalar": a.get("scalar"), "form": "rop" if a.get("reflected") else None})
    return _scalar_facts(as_op, c.ins[0])


@_rule("sum", "nansum", "cumsum_cumprod")
def _sum(c: _Out) -> Any:
    return _sum_facts(c.ins[0]) if c.attrs.get("fn", "cumsum") in ("cumsum", "sum", "nansum") else _PASS


@_rule("prod", "cumsum_cumprod")
def _prod(c: _Out) -> Any:
    return _product_facts(c.ins[0], c.dt) if c.name == "prod" or c.attrs.get("fn") == "cumprod" else _PASS


@_rule("logaddexp", "logaddexp2")
def _logaddexp(c: _Out) -> Any:
    if len(c.ins) != 2:
        return _PASS
    a, b = c.ins  # between max(a, b) and that + ln 2 (+ 1)
    top = max(a.hi, b.hi) + (math.log(2.0) if c.name == "logaddexp" else 1.0)
    return Facts(max(a.lo, b.lo), top + 1e-3 * abs(top) if math.isfinite(top) else INF)


@_rule("logcumsumexp")
def _logcumsumexp(c: _Out) -> Any:
    g = c.ins[0]  # at least each running maximum; the first equals its element
    return Facts(g.lo, INF, at_most=g.hi if math.isfinite(g.hi) else None)


@_rule("logsumexp")
def _logsumexp(c: _Out) -> Any:
    g = c.ins[0]  # at least the greatest element (at least lo + ln n over n elements, see _sized_facts)
    return Facts(g.lo, INF) if g.lo > -INF else None


@_rule("pad")
def _pad(c: _Out) -> Any:
    g = c.ins[0]
    if c.attrs.get("mode") != "constant":  # reflect, replicate, circular: copies of the operand's own elements
        return g
    v = _number(c.attrs.get("value"), 0.0)
    if math.isnan(v):
        return None
    held = v if _pads_something(c.op, c.concrete) else None
    return Facts(min(g.lo, v), max(g.hi, v), g.integral and float(v).is_integer(), holds=held)


@_rule("tril_triu")
def _triangle(c: _Out) -> Any:
    g = c.ins[0]
    return Facts(min(g.lo, 0.0), max(g.hi, 0.0), g.integral, zero=triangle_drops(c.op, c.concrete))


@_rule("normalize")
def _normalize(c: _Out) -> Any:
    return _normalize_facts(c.op, c.ins[0])


@_rule("local_response_norm")
def _lrn(c: _Out) -> Any:
    return _lrn_facts(c.op, c.ins[0], c.dt)


@_rule("batch_norm", "instance_norm", "layer_norm", "group_norm", "rms_norm")
def _norm(c: _Out) -> Any:
    centered, unit = _standardised(c.op)
    return Facts(centered=centered, unit=unit)


@_rule("add", "sub", "rsub")
def _shift(c: _Out) -> Any:
    return _shift_facts(c.op, c.ins[0], c.dt) if len(c.ins) == 1 and "scalar" in c.attrs else _PASS


@_rule("add", "sub")
def _sum_of_tensors(c: _Out) -> Any:
    return _sum_of_two(c.op, c.ins, c.dt) if len(c.ins) == 2 else _PASS


@_rule("copysign")
def _copysign(c: _Out) -> Any:
    sign = _sign_of_copysign(c.op, c.ins)
    if sign is not None:
        return _copysign_facts(c.ins[0], sign)  # (the scalar form is copysign(x, s) only)
    if len(c.ins) != 2 or value_set(c.ins[0]) is None:
        return _PASS
    mags = {abs(v) for v in value_set(c.ins[0])}  # |x| with y's sign, which the graph leaves open
    points = tuple(sorted(mags | {-m for m in mags}))
    if len(points) > _MAX_VALUES:
        return None
    return Facts(min(points), max(points), integral=c.ins[0].integral, values=points)


@_rule("xlogy")
def _xlogy_bits(c: _Out) -> Any:
    return Facts(0.0, 0.0, integral=True, zero=True) if _xlogy_of_bits(c.ins) else _PASS


@_rule(*_SHRINKS)
def _all_shrunk(c: _Out) -> Any:
    return Facts(0.0, 0.0, integral=True, zero=True) if _shrunk_away(c.op, c.ins) else _PASS


@_rule(*_POWERS)
def _zero_power(c: _Out) -> Any:
    return Facts(0.0, 0.0, integral=True, zero=True) if _zero_base_power(c.op, c.ins) else _PASS


@_rule(*_POWERS)
def _scalar_power(c: _Out) -> Any:
    return _scalar_power_facts(c.op, c.ins[0], c.dt) if len(c.ins) == 1 and "scalar" in c.attrs else _PASS


@_rule("div_rounding")
def _rounded_quotient(c: _Out) -> Any:
    if len(c.ins) == 1 and "scalar" in c.attrs:
        return _floor_div_facts(c.op, c.ins[0])
    if len(c.ins) == 2:
        return Facts(integral=True)  # a rounded quotient: a whole number wherever finite
    return _PASS


@_rule("mul", "mul_promote")
def _product_of_two(c: _Out) -> Any:
    if len(c.ins) != 2:
        return _PASS
    x, y = c.ins
    lo, hi = _product_bounds(x, y, c.same)
    if c.dt in _INT_RANGES and not (math.isfinite(lo) and math.isfinite(hi)):
        return None  # an unbounded integer product may wrap around: only the dtype is known
    return Facts(lo, hi, integral=x.integral and y.integral, zero=x.zero or y.zero)


@_rule("logit")
def _logit(c: _Out) -> Any:
    return _logit_facts(c.op) if len(c.ins) == 1 and _logit_facts(c.op) is not None else _PASS


@_rule("square")
def _integer_square(c: _Out) -> Any:
    if c.dt in _INT_RANGES and not _fits_square(c.ins[0], c.dt):
        return None  # an integer square beyond the dtype wraps around (int8 16 * 16 is 0)
    return _PASS


@_rule("hardtanh", "clamp", "threshold")
def _clamped(c: _Out) -> Any:
    return _unary_facts(c.op, c.ins[0])  # (their bounds may be tensors: the first operand is the value)


@_rule("log_softmax")
def _log_probabilities(c: _Out) -> Any:
    if len(c.ins) != 1:
        return _PASS
    f = _unary_facts(c.op, c.ins[0])
    return replace(f, negative=True) if f is not None else None


def _finished(c: _Out, f: Facts | None, fixed: bool, constant: bool) -> Facts:
    """A rule's facts made consistent: what the op carries over from its operand, the dtype's
    bounds, the graph's fixedness, the operand's points, continuity."""
    base = dtype_facts(c.dt)
    f = _carried(c, base if f is None else f)
    f = _within_dtype(c, f, base)
    if fixed != f.fixed and not constant:
        f = replace(f, integral=f.integral or base.integral, fixed=fixed)
    elif base.integral and not f.integral:
        f = replace(f, integral=True)
    if c.pos == 0 and c.n_out == 1 and len(c.ins) == 1 and _elementwise(c.op):
        f = _through_points(c.op, c.ins[0], f, c.dt)
    if f.lo == f.hi and math.isfinite(f.lo) and not f.fixed:  # one value wherever finite: a constant
        f = replace(f, fixed=True)
    continuous = is_float(c.dt) and _keeps_continuous(c.op, c.ins) and not f.fixed
    return f if f.continuous == continuous else replace(f, continuous=continuous)


def _carried(c: _Out, f: Facts) -> Facts:
    """A 0 that survives f(0) = 0 (tril(x) -> hardswish), a value <= 0 that a sign-keeping op
    keeps (log(mish(instance_norm(x))): mish is <= 0 where x is)."""
    if len(c.ins) != 1:
        return f
    r, g = numerics(c.name), c.ins[0]
    if g.zero and r.zero_at_zero and not f.zero:
        f = replace(f, zero=True)
    if r.sign_keeping and not f.nonpos and _holds_nonpositive(g):
        f = replace(f, nonpos=True)
    return f


def _within_dtype(c: _Out, f: Facts, base: Facts) -> Facts:
    """`f` cut to the dtype's bounds (a cast, a bool result); nothing known of an integer result
    beyond its dtype, which wraps around (neg of a uint8), or of a contradiction (inf / inf)."""
    rng = _INT_RANGES.get(c.dt)
    wraps = rng is not None and (rng[0] > f.lo > -INF or INF > f.hi > rng[1] or (rng[0] == 0 and f.lo < 0))
    if wraps and not c.name.startswith("to_"):
        f = base
    elif f.lo < base.lo or f.hi > base.hi:
        f = Facts(max(f.lo, base.lo), min(f.hi, base.hi), f.integral or base.integral, f.zero, f.centered, f.unit,
                  f.fixed)
    if f.lo > f.hi or math.isnan(f.lo) or math.isnan(f.hi):
        f = base
    return f


def _elementwise(op: OpSpec) -> bool:
    return op.name in _ELEMENTWISE_1 or (op.name.startswith("to_") and op.name != "to_bool")


_UNKNOWN = object()


def _point_image(op: OpSpec, p: float, dtype: str) -> Any:
    """What elementwise `op` makes of the single value p: a float, None where it is non-finite
    (a point outside a vulnerable op's domain), `_UNKNOWN` where the facts do not pin it."""
    eps = _number(op.attrs.get("eps"), math.nan) if op.name == "logit" else math.nan
    if 0 < eps < 0.5:  # logit clamped into [eps, 1 - eps] first: finite everywhere
        q = min(max(p, eps), 1.0 - eps)
        return math.log(q / (1.0 - q))
    if op.name in _DOMAIN and not _in_domain(op.name, p):
        return None
    g = Facts(p, p, integral=float(p).is_integer())
    out = value_facts(op, [g], [dtype], False)[0]
    return out.lo if out.lo == out.hi and math.isfinite(out.lo) else _UNKNOWN


def _through_points(op: OpSpec, g: Facts, f: Facts, dtype: str) -> Facts:
    """`f` sharpened by the operand's known points: the few values it takes map to the few the
    result takes (100 * heaviside(bool, bool) is 0 or 100), a value it holds to one the result
    holds (a -2 pad border through trunc division by 3 is -0.0, a pole of lgamma)."""
    if g.values is not None and f.values is None:
        images = [_point_image(op, p, dtype) for p in g.values]
        vals = sorted({v for v in images if v is not None}) if _UNKNOWN not in images else []
        if vals and len(vals) <= _MAX_VALUES and f.lo <= vals[0] and vals[-1] <= f.hi:
            f = replace(f, lo=vals[0], hi=vals[-1], values=tuple(vals), lo_limit=f.lo_limit and f.lo == vals[0],
                        hi_limit=f.hi_limit and f.hi == vals[-1])
    held = g.holds if g.holds is not None else 0.0 if g.zero else None  # (a 0 of tril(x) is held too)
    if held is not None and f.holds is None:
        h = _point_image(op, held, dtype)
        if h is not None and h is not _UNKNOWN and not (h == 0 and f.zero):
            f = replace(f, holds=h)
    return f


def _scalar_power_facts(op: OpSpec, f: Facts, dtype: str) -> Facts | None:
    """x ** s and s ** x for a scalar s: x ** 0 and 1 ** x are 1; a single value x (a point of
    the operand) gives its power."""
    s = _number(op.attrs.get("scalar"), math.nan)
    rop = op.attrs.get("form") == "rop"
    if not math.isfinite(s):
        return None
    if (s == 0 and not rop) or (s == 1 and rop):
        return Facts(1.0, 1.0, integral=True)
    if f.lo != f.hi or not math.isfinite(f.lo) or dtype == "bool":
        return None
    base, exp = (s, f.lo) if rop else (f.lo, s)
    if not is_float(dtype) and exp < 0:  # integer powers to a negative exponent truncate
        return None
    try:
        v = base ** exp
    except (OverflowError, ZeroDivisionError):
        return None
    if isinstance(v, complex) or not math.isfinite(v):
        return None
    return Facts(float(v), float(v), integral=float(v).is_integer())


def _floor_div_facts(op: OpSpec, f: Facts) -> Facts | None:
    """x // s, trunc(x / s) for a scalar s (`//`, floor_divide and rounding_mode="floor" floor;
    "trunc" truncates): the bounds of x / s rounded, integral; an exact 0 stays 0."""
    a = op.attrs
    s = _number(a.get("scalar"), math.nan)
    rnd = _trunc if a.get("rounding_mode") == "trunc" else _floor
    if a.get("form") == "rop" and math.isfinite(s):  # s // x: a whole number too, wherever finite
        positive, negative = f.lo > 0 or (f.lo == 0 and f.lo_limit), f.hi < 0 or (f.hi == 0 and f.hi_limit)
        if s == 0 or not (positive or negative):
            return Facts(integral=True)
        lo, hi = sorted(math.copysign(INF, s * (1 if positive else -1)) if b == 0 else s / b for b in (f.lo, f.hi))
        lo, hi = lo - 1e-3 * abs(lo), hi + 1e-3 * abs(hi)
        return Facts(float(rnd(lo)), float(rnd(hi)), integral=True)
    if a.get("form") == "rop" or not math.isfinite(s) or s == 0:
        return None
    lo, hi = sorted((f.lo / s, f.hi / s))
    if math.isnan(lo) or math.isnan(hi):
        return None
    if f.lo != f.hi:  # room for the quotient's rounding in low precision (a point is kept exact)
        lo, hi = lo - 1e-3 * abs(lo), hi + 1e-3 * abs(hi)
    return Facts(float(rnd(lo)), float(rnd(hi)), integral=True, zero=f.zero)


def _keeps_continuous(op: OpSpec, ins: list[Facts]) -> bool:
    name = op.name
    if not ins or not all(g.continuous for g in ins):
        return False
    if name == "mul":  # x * y is 0 only where x or y is; a scalar factor must not be 0
        k = _number(op.attrs.get("scalar"), 0.0)
        return len(ins) == 2 or (math.isfinite(k) and k != 0)
    return name in _KEEPS_CONTINUOUS or (name.startswith("to_") and is_float(name[3:]))


def _never_zero(f: Facts) -> bool:
    """No element is exactly 0 in practice: the bounds exclude it (or meet it only in saturation,
    as sigmoid's 0), or a continuous float."""
    return (f.lo > 0 or f.hi < 0 or (f.lo == 0 and f.lo_limit and f.hi > 0) or (f.hi == 0 and f.hi_limit and f.lo < 0)
            or f.continuous)


def _subset_facts(op: OpSpec, pos: int, g: Facts) -> Facts:
    """Some of the operand's elements: bounds, limits and value sets carry over. A min-type
    reduction of a value that holds a 0 holds one too if nothing is below 0 (and a value <= 0 in
    any case); a max-type one mirrors that. Sorted values keep every "holds" fact."""
    f = Facts(g.lo, g.hi, g.integral, fixed=g.fixed, values=g.values, lo_limit=g.lo_limit, hi_limit=g.hi_limit,
              continuous=g.continuous)
    if pos == 0 and op.name == "sort" and op.attrs.get("fn") == "sort":
        return replace(f, zero=g.zero, negative=g.negative, nonpos=g.nonpos, holds=g.holds, at_most=g.at_most)
    side = _reduction_side(op, pos)
    if side == "min":
        below = [a for a in (g.at_most, g.holds) if a is not None]
        return replace(f, zero=g.zero and g.lo >= 0, nonpos=g.zero or g.nonpos or g.negative, negative=g.negative,
                       at_most=min(below) if below else None)
    if side == "max":
        return replace(f, zero=g.zero and g.hi <= 0)
    return f


def _reduction_side(op: OpSpec, pos: int) -> str | None:
    """Whether result `pos` of `op` is each group's minimum ("min") or maximum ("max")."""
    name, fn = op.name, op.attrs.get("fn")
    if pos != 0 and name != "aminmax":
        return None
    if (name == "max_min" and fn == "min") or (name == "amax_amin" and fn == "amin") or (
            name == "cummax_cummin" and fn == "cummin") or (name == "aminmax" and pos == 0):
        return "min"
    if (name == "max_min" and fn == "max") or (name == "amax_amin" and fn == "amax") or (
            name == "cummax_cummin" and fn == "cummax") or (name == "aminmax" and pos == 1):
        return "max"
    return None


def _strictly_negative(f: Facts) -> bool:
    return f.hi < 0 or (f.hi == 0 and f.hi_limit and f.lo < 0)


def _strictly_positive(f: Facts) -> bool:
    return f.lo > 0 or (f.lo == 0 and f.lo_limit and f.hi > 0)


def _atan2_facts(y: Facts, x: Facts) -> Facts:
    """atan2(y, x) takes y's sign (y < 0: [-pi, 0], y > 0: [0, pi]; a y that may be +-0 gives
    +-pi for x < 0) and lies in [-pi/2, pi/2] for x > 0."""
    lo, hi = -math.pi, math.pi
    if _strictly_negative(y):
        hi = 0.0
    elif _strictly_positive(y):
        lo = 0.0
    if _strictly_positive(x):
        lo, hi = max(lo, -math.pi / 2), min(hi, math.pi / 2)
    return Facts(lo, hi)


def _atan2_of_itself(x: Facts) -> Facts:
    """atan2(x, x) is pi/4 for x > 0, -3pi/4 for x < 0 and 0 at +0 (-pi at -0.0, which only a
    float can hold): never as much as 1. A continuous x is never 0."""
    points = {math.pi / 4, -3 * math.pi / 4}
    if not x.continuous:
        points |= {0.0} if x.integral else {0.0, -math.pi}
    if x.lo > 0:
        points &= {math.pi / 4}
    elif x.hi < 0:
        points &= {-3 * math.pi / 4}
    vals = tuple(sorted(points))
    return Facts(vals[0], vals[-1], values=vals, zero=x.zero and 0.0 in points)


def _min_max_facts(lower: bool, ins: list[Facts]) -> Facts:
    """Elementwise min (or max) of operands: each bound is the least (greatest) of theirs. A bound
    is a limit where the operands that set it meet it only as a limit (min(x, y) is 0 only where
    x and y reach 0; log10(sigmoid(x)) never does, so neither does its min with anything)."""
    pick = min if lower else max
    lo, hi = pick(g.lo for g in ins), pick(g.hi for g in ins)
    if lower:  # min(x, y) reaches hi only where both do; lo where either does
        hi_limit = any(g.hi == hi and g.hi_limit for g in ins)
        lo_limit = all(g.lo_limit for g in ins if g.lo == lo)
    else:
        lo_limit = any(g.lo == lo and g.lo_limit for g in ins)
        hi_limit = all(g.hi_limit for g in ins if g.hi == hi)
    return Facts(lo, hi, integral=all(g.integral for g in ins), lo_limit=lo_limit and lo > -INF,
                 hi_limit=hi_limit and hi < INF,
                 nonpos=lower and any(g.zero or g.nonpos or g.negative for g in ins))


def _product_bounds(a: Facts, b: Facts, square: bool) -> tuple[float, float]:
    """Bounds of a * b (a * a where `square`: never below 0)."""
    if square:
        m_lo = 0.0 if a.lo <= 0 <= a.hi else min(abs(a.lo), abs(a.hi))
        m_hi = max(abs(a.lo), abs(a.hi))
        return m_lo * m_lo, m_hi * m_hi
    corners = [p * q for p in (a.lo, a.hi) for q in (b.lo, b.hi)]
    if any(math.isnan(c) for c in corners):  # 0 * inf: anything
        return -INF, INF
    return min(corners), max(corners)


def _addcmul_facts(op: OpSpec, ins: list[Facts], square: bool, dtype: str) -> Facts | None:
    """x + value * t1 * t2 (t1 * t1 where the engine sees one value twice: `square`)."""
    v = _number(op.attrs.get("value"), 1.0)
    if not math.isfinite(v):
        return None
    x, t1, t2 = ins
    p_lo, p_hi = _product_bounds(t1, t2, square)
    s_lo, s_hi = sorted((v * p_lo, v * p_hi)) if v != 0 else (0.0, 0.0)
    if math.isnan(s_lo) or math.isnan(s_hi):
        return None
    integral = x.integral and t1.integral and t2.integral and float(v).is_integer()
    return _in_dtype(x.lo + s_lo, x.hi + s_hi, integral, dtype)


def _sign_of_copysign(op: OpSpec, ins: list[Facts]) -> float | None:
    """The sign (+1 or -1) that copysign(x, y) gives every element, where y's is known: a scalar
    y (-0.0 counts as negative), or a tensor y that is never 0 on one side."""
    if len(ins) == 1:
        s = _number(op.attrs.get("scalar"), math.nan)
        return None if math.isnan(s) else math.copysign(1.0, s)
    y = ins[1]
    if y.lo > 0 or (y.lo == 0 and y.lo_limit and y.hi > 0):
        return 1.0
    if y.hi < 0 or (y.hi == 0 and y.hi_limit and y.lo < 0):
        return -1.0
    return None


def _copysign_facts(x: Facts, sign: float) -> Facts:
    """|x| with a known sign: copysign(w, -2.5) <= 0, and 0 only where w is."""
    m_lo = 0.0 if x.lo <= 0 <= x.hi else min(abs(x.lo), abs(x.hi))
    m_hi = max(abs(x.lo), abs(x.hi))
    lo, hi = (m_lo, m_hi) if sign > 0 else (-m_hi, -m_lo)
    near = (x.lo >= 0 and x.lo_limit) or (x.hi <= 0 and x.hi_limit)  # |x| meets m_lo only as a limit
    points = value_set(x)
    vals = tuple(sorted({sign * abs(v) for v in points})) if points is not None else None
    return Facts(lo, hi, x.integral, zero=x.zero, values=vals,
                 lo_limit=sign > 0 and near, hi_limit=sign < 0 and near,
                 negative=sign < 0 and x.continuous)


def _modulo_facts(name: str, x: Facts, y: Facts) -> Facts | None:
    """fmod/remainder of two tensors: 0 % y is 0 (y != 0, as finite results need), so a dividend
    that holds a 0 gives a result that holds one; remainder takes a one-signed divisor's sign."""
    zero = x.zero or (x.lo == x.hi == 0)
    integral = x.integral and y.integral
    # a dividend of the divisor's sign gives the exact fmod(x, y), below |y| (see `_scalar_facts`)
    if name == "remainder" and y.lo >= 0:
        return Facts(0.0, y.hi, integral, zero=zero, hi_limit=x.lo >= 0 and y.hi < INF)
    if name == "remainder" and y.hi <= 0:
        return Facts(y.lo, 0.0, integral, zero=zero, lo_limit=x.hi <= 0 and y.lo > -INF)
    if name == "fmod":  # the dividend's sign, |fmod(x, y)| <= |x|
        return Facts(min(x.lo, 0.0), max(x.hi, 0.0), integral, zero=zero)
    return Facts(integral=integral, zero=zero) if zero else None



def _bitwise_facts(op: OpSpec, ins: list[Facts]) -> Facts | None:
    """Signs of integer x & y, x | y, x ^ y (two's complement): & is negative iff both operands
    are, and lies in [0, y] for a y >= 0; | is negative iff either is (and >= each operand);
    ^ is negative iff exactly one is."""
    if len(ins) == 2:
        x, y = ins
    else:
        s = _number(op.attrs.get("scalar"), math.nan)
        if not (math.isfinite(s) and float(s).is_integer()):
            return None
        x, y = ins[0], Facts(s, s, integral=True)
    neg = [g.hi < 0 for g in (x, y)]
    nonneg = [g.lo >= 0 for g in (x, y)]
    if op.name == "bitwise_and":
        if all(neg):  # clearing bits: below both
            return Facts(-INF, min(x.hi, y.hi), integral=True)
        if any(nonneg):  # (a 0 that one operand holds stays: tril(x) & 2)
            zero = x.zero or (len(ins) == 2 and y.zero)  # 0 & y is 0
            return Facts(0.0, min(g.hi for g in (x, y) if g.lo >= 0), integral=True, zero=zero)
        return None
    if op.name == "bitwise_or":
        if any(neg):  # setting bits: at least the negative operand, and still negative
            return Facts(max(g.lo for g in (x, y) if g.hi < 0), -1.0, integral=True)
        if all(nonneg):
            return Facts(max(x.lo, y.lo), INF, integral=True)
        return None
    if all(n or p for n, p in zip(neg, nonneg)):  # xor: each sign known
        return Facts(-INF, -1.0, integral=True) if neg[0] != neg[1] else Facts(0.0, INF, integral=True)
    return None


def _fits_square(g: Facts, dtype: str) -> bool:
    m = max(abs(g.lo), abs(g.hi))
    return math.isfinite(m) and m * m <= _INT_RANGES[dtype][1]


def _normalize_facts(op: OpSpec, g: Facts) -> Facts:
    """F.normalize(x, p) is x / max(||x||_p, eps): each element keeps its sign, and for p > 0
    |x_i| <= ||x||_p (the norm is at least the largest |x_i|, rounded sums included), so it
    lies within [-1, 1]."""
    p = _number(op.attrs.get("p"), 2.0)
    if p > 0:
        lo, hi = -1.0, 1.0
    elif p == 0:  # the norm counts the non-zeros (an all-zero x is divided by eps): |x| at most
        lo, hi = g.lo, g.hi
    else:
        lo, hi = -INF, INF
    return Facts(0.0 if g.lo >= 0 else lo, 0.0 if g.hi <= 0 else hi, negative=g.negative or g.hi < 0)


# Spacing of floats just above 1, per dtype: a factor further from 1 than a few of these is
# not lost to rounding.
_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23, "float64": 2.0 ** -52}


_LRN_MAX_SIZE = 2 * MAX_CHANNELS  # (LocalResponseNorm.requires)


def _lrn_facts(op: OpSpec, g: Facts, dtype: str) -> Facts | None:
    """local_response_norm: x / (k + alpha * mean of x ** 2 over its window) ** beta. With k >= 1,
    alpha >= 0 and beta > 0 the divisor is >= 1: each element keeps its sign and shrinks. The
    window holds x itself, so an element at a bound b is divided by at least
    (k + alpha * b ** 2 / size) ** beta; where that is clearly above 1 in the dtype, b is never met."""
    a = op.attrs
    k, alpha, beta = _number(a.get("k"), 1.0), _number(a.get("alpha"), 1e-4), _number(a.get("beta"), 0.75)
    size = a.get("size")
    if not (k >= 1 and alpha >= 0 and beta > 0):
        return None
    lo, hi = min(g.lo, 0.0), max(g.hi, 0.0)
    eps = _EPS.get(dtype)

    if not isinstance(size, int) or isinstance(size, bool):
        size = _LRN_MAX_SIZE  # not solved yet: the largest window the spec allows

    def shrinks(b: float) -> bool:  # an element equal to b comes out strictly smaller in magnitude
        if eps is None or size < 1 or not math.isfinite(b) or b == 0:
            return False
        return (k + alpha * b * b / size) ** beta - 1 > 8 * eps

    lo_limit = lo < 0 and (g.lo_limit or shrinks(lo))
    hi_limit = hi > 0 and (g.hi_limit or shrinks(hi))
    return Facts(lo, hi, lo_limit=lo_limit, hi_limit=hi_limit, negative=g.hi < 0 or g.negative)


def _product_facts(g: Facts, dtype: str) -> Facts | None:
    """prod/cumprod (with dtype=, the operand cast first: an int64 prod of tanh values is of 0s):
    a factor 0 makes the group's product 0, so an operand that holds a 0 gives a result that
    holds one, and an all-zero operand gives zeros."""
    if dtype == "bool":
        return None
    if not is_float(dtype) and not g.integral:
        g = _cast_to_int_facts(g, dtype) or Facts(integral=True)
    if g.lo == g.hi == 0:
        return Facts(0.0, 0.0, integral=True, zero=True)
    if g.zero:
        return Facts(0.0 if g.lo >= 0 and is_float(dtype) else -INF, INF, g.integral, zero=True)
    return None


def _heaviside_facts(x: Facts, v: Facts) -> Facts:
    """heaviside(x, v) is 0 for x < 0, 1 for x > 0 and v where x is exactly 0, which a continuous
    x never is in practice."""
    if _strictly_positive(x):
        return Facts(1.0, 1.0, integral=True, values=(1.0,))
    if _strictly_negative(x):
        return Facts(0.0, 0.0, integral=True, zero=True, values=(0.0,))
    if x.continuous:
        return Facts(0.0, 1.0, integral=True, values=(0.0, 1.0))
    points = value_set(v)
    if points is not None and len(set(points) | {0.0, 1.0}) <= _MAX_VALUES:
        vals = tuple(sorted(set(points) | {0.0, 1.0}))
        return Facts(vals[0], vals[-1], integral=all(float(p).is_integer() for p in vals), values=vals)
    return Facts(min(0.0, v.lo), max(1.0, v.hi), integral=v.integral)


def _ceil(x: float) -> float:
    return x if math.isinf(x) else math.ceil(x)


def _floor(x: float) -> float:
    return x if math.isinf(x) else math.floor(x)


def _practical(f: Facts) -> tuple[float, float]:
    """Bounds of integer values as met in practice: a bound that is a limit (floor(sigmoid(x))
    is 1 only where sigmoid saturates) gives way to the next integer inside."""
    lo = f.lo + 1 if f.lo_limit and f.integral and f.lo < f.hi else f.lo
    hi = f.hi - 1 if f.hi_limit and f.integral and lo < f.hi else f.hi
    return lo, hi


def operand_need(op: type[OpSpec] | OpSpec) -> str | None:
    """The name of the domain (`_DOMAIN`) that vulnerable unary `op` puts on its operand in every
    all-finite run, or None: a value that feeds acosh is >= 1 for every consumer, so that
    erfinv(-mean(v)) beside acosh(v) is as doomed as erfinv(-mean(acosh's domain)). Poles and
    clamped ops (logit with eps) say nothing about an interval."""
    name = op.name
    if name not in _DOMAIN or name in _POLE_AT_ZERO:
        return None
    if name == "logit" and getattr(op, "attrs", {}).get("eps") not in (None, 0.0):
        return None
    return name


def within(name: str, f: Facts) -> Facts | None:
    """Facts `f` narrowed to the domain of unary op `name` (see `operand_need`), or None when no
    value is left in practice. (A single point left, acos(v) beside acosh(v), stays: an integer v
    meets it, and so may a saturating one, sqrt(-exp(x)) at exp's underflow.)"""
    if _never_finite(name, f):
        return None
    lo, hi, lo_open, hi_open = _DOMAIN[name]
    if f.integral:  # the integers inside
        if math.isfinite(lo):
            lo, lo_open = (math.floor(lo) + 1 if lo_open else math.ceil(lo)), False
        if math.isfinite(hi):
            hi, hi_open = (math.ceil(hi) - 1 if hi_open else math.floor(hi)), False
    new_lo, lo_limit = (lo, lo_open) if lo > f.lo else (f.lo, f.lo_limit)
    new_hi, hi_limit = (hi, hi_open) if hi < f.hi else (f.hi, f.hi_limit)
    if new_lo > new_hi or (new_lo == new_hi and (lo_limit or hi_limit)):
        return None
    values = f.values
    if values is not None:
        values = tuple(v for v in values if _in_domain(name, v)) or None
    return replace(f, lo=new_lo, hi=new_hi, lo_limit=lo_limit, hi_limit=hi_limit, values=values)


def _never_finite(name: str, f: Facts) -> bool:
    """Whether unary `name` is non-finite (in practice) on every value with facts `f`."""
    lo, hi, lo_open, hi_open = _DOMAIN[name]
    if f.hi < lo or (f.hi == lo and lo_open) or f.lo > hi or (f.lo == hi and hi_open):
        return True
    zero_ok = (lo < 0 or (lo == 0 and not lo_open)) and hi > 0 and name not in _POLE_AT_ZERO
    if (f.zero or (f.lo == f.hi == 0)) and not zero_ok:
        return True
    if (f.hi_limit and f.hi == lo) or (f.lo_limit and f.lo == hi):  # the domain is met only in saturation
        return True
    if f.centered and lo >= 0:  # needs every element >= 0 with mean 0: all zeros at best
        return True
    if f.unit and ((lo >= -1 and hi <= 1) or lo >= 1):  # unit spread: not all inside [-1, 1], nor all >= 1
        return True
    if f.holds is not None and not _in_domain(name, f.holds):
        return True
    if f.at_most is not None and (f.at_most < lo or (f.at_most == lo and lo_open)):  # asin(log_softmax) over 3+
        return True
    points = f.values  # (integer ranges are judged below, with their saturation limits)
    if points is not None:
        inside = [v for v in points if _in_domain(name, v)]
        if not inside or (len(inside) == 1 and len(points) > 1):  # none, or one every element must equal
            return True
    if lo >= 0 and (f.negative or (f.centered and f.unit)):
        return True
    if f.nonpos and (lo > 0 or (lo == 0 and lo_open)):  # log of min(tril(x), y)
        return True
    if f.integral:
        if numerics(name).poles == "gamma":  # no integer below 1
            lo, lo_open = 1, False
        f_lo, f_hi = _practical(f)
        a = max(_ceil(lo) + (1 if lo_open and float(lo).is_integer() else 0), _ceil(f_lo))
        b = min(_floor(hi) - (1 if hi_open and float(hi).is_integer() else 0), _floor(f_hi))
        if b < a or (b == a and f_lo != f_hi):  # no integer, or only one that every element must equal
            return True
    return False


# Half the spacing of floats just below 1: a smaller eps leaves 1 - eps == 1.
_HALF_GAP_BELOW_ONE = {"float16": 2.0 ** -12, "bfloat16": 2.0 ** -9}


def _eps_lost_at_one(op: type[OpSpec] | OpSpec) -> bool:
    """logit(x, eps) clamps x into [eps, 1 - eps] in x's own dtype; in float16/bfloat16 a small
    eps (1e-6) leaves 1 - eps == 1, so every x >= 1 still gives inf."""
    eps = _number(getattr(op, "attrs", {}).get("eps"), math.nan)
    gap = _HALF_GAP_BELOW_ONE.get(op.in_sigs[0][0]) if getattr(op, "in_sigs", None) else None
    return gap is not None and 0 < eps < gap


def _in_domain(name: str, x: float) -> bool:
    lo, hi, lo_open, hi_open = _DOMAIN[name]
    if x < lo or x > hi or (x == lo and lo_open) or (x == hi and hi_open):
        return False
    poles = numerics(name).poles
    return not (poles is not None and x <= 0 and (x == 0 or (poles == "gamma" and float(x).is_integer())))


def _self_cancels(op: OpSpec) -> bool:
    return op.name in _SELF_CANCELLED_VALUE and op.attrs.get("alpha") in (None, 1)


def _self_divides(op: type[OpSpec] | OpSpec) -> bool:
    return op.name in _SELF_DIVIDING and "scalar" not in getattr(op, "attrs", {})


# Where exp-like ops overflow: ln (log2 for exp2) of the result dtype's largest finite value;
# sinh and cosh overflow beyond that plus ln 2, on either side.
_LN_MAX = {"float16": math.log(65504.0), "bfloat16": math.log(3.3895e38), "float32": math.log(3.4028e38),
           "float64": math.log(1.7976e308)}


def _always_overflows(op: type[OpSpec] | OpSpec, f: Facts) -> bool:
    """exp/expm1/exp2 of values above the overflow point, sinh/cosh of values beyond it (e.g. a
    float16 exp of 100 - x for small integers x): inf whatever the inputs."""
    sigs = getattr(op, "in_sigs", None)
    if not sigs:
        return False
    dt = sigs[0][0] if is_float(sigs[0][0]) else "float32"
    t = _LN_MAX.get(dt)
    if t is None:
        return False
    if op.name == "exp2":
        return f.lo > t / math.log(2.0)
    if op.name in ("sinh", "cosh"):
        t += math.log(2.0)
        return f.lo > t or f.hi < -t
    return f.lo > t


def _negative_power_sum(op: type[OpSpec] | OpSpec, f: Facts) -> bool:
    """lp_pool is (sum x ** p) ** (1 / p): NaN for a negative x to a fractional p, and for a
    negative sum under an odd p (every x < 0)."""
    p = _number(getattr(op, "attrs", {}).get("norm_type"), math.nan)
    if math.isnan(p):
        return False
    if not float(p).is_integer():
        return _negative_somewhere(f)
    # (an odd p over values <= 0 that hold one below 0, log_softmax's: a window sums below 0)
    return p % 2 == 1 and (f.hi < 0 or (f.hi <= 0 and (f.hi_limit or f.negative)))


def _xlogy_of_bits(ins: list[Facts]) -> bool:
    """xlogy(x, y) with y 0 or 1 is x * log(1) = 0, or -inf (x != 0), or 0 (x == 0): 0 wherever
    finite, whatever the inputs."""
    return len(ins) == 2 and value_set(ins[1]) is not None and set(value_set(ins[1])) <= {0.0, 1.0}


def _shrunk_away(op: type[OpSpec] | OpSpec, ins: list[Facts]) -> bool:
    """hardshrink/softshrink zero every |x| <= lambd: an operand bounded within lambd (cos(x)
    with lambd 1) comes out all zeros, whatever the inputs."""
    lambd = _number(getattr(op, "attrs", {}).get("lambd"), 0.5)
    return bool(ins) and not math.isnan(lambd) and max(-ins[0].lo, ins[0].hi) <= lambd


def _pads_something(op: OpSpec, concrete: "Concrete | None") -> bool:
    """Whether a constant pad adds border elements. Amounts are the solver's until solved:
    any padded axis may then add some, which is how the border is counted (a vulnerable op that
    the border would doom is not built on a pad that may add one)."""
    k = op.attrs.get("k", 0)
    if not k:
        return False
    attrs = concrete.attrs if concrete is not None else op.attrs
    amounts = [attrs.get(f"pad{i}") for i in range(2 * k)]
    return any(not isinstance(a, int) or a > 0 for a in amounts)


def _fractional_exponent(op: type[OpSpec] | OpSpec, ins: list[Facts]) -> bool:
    """x ** y with y a float that is no whole number in practice: a float tensor exponent that
    the graph does not make integral or fix (value search never aims at exact integers), or a
    fractional scalar (0.5, -2.5)."""
    a = getattr(op, "attrs", {})
    if len(ins) == 2:
        return not ins[1].integral and not ins[1].fixed
    if len(ins) == 1 and "scalar" in a and a.get("form") != "rop":
        s = _number(a["scalar"], math.nan)
        return math.isfinite(s) and not float(s).is_integer()
    return False


def _negative_exponent(op: type[OpSpec] | OpSpec, ins: list[Facts]) -> bool:
    """x ** y with y < 0 everywhere: a negative scalar exponent, or a tensor one below 0."""
    a = getattr(op, "attrs", {})
    if len(ins) == 2:
        return _strictly_negative(ins[1])
    if len(ins) == 1 and "scalar" in a and a.get("form") != "rop":
        return _number(a["scalar"], math.nan) < 0
    return False


def _zero_base_power(op: type[OpSpec] | OpSpec, ins: list[Facts]) -> bool:
    """0 ** y for a fractional y is 0 (y > 0) or inf (y < 0): wherever it is finite it is all
    zeros, whatever the inputs, so it is as good as fixed (fmod(x, positive(x)) ** x)."""
    return bool(ins) and ins[0].fixed and ins[0].lo == ins[0].hi == 0 and _fractional_exponent(op, ins)


def _negative_somewhere(f: Facts) -> bool:
    """Holds a value < 0 in practice: below zero throughout, negative but for saturation, or
    standardised (mean zero, unit spread: all zeros is out of reach)."""
    return (f.negative or f.hi < 0 or (f.hi <= 0 and f.hi_limit and not f.lo == f.hi == 0)
            or (f.centered and f.unit) or (f.holds is not None and f.holds < 0))


def makes_fixed(op: OpSpec, inputs: list[int], ins: list["Facts"]) -> bool:
    """Whether `op`'s results are the same whatever the inputs. `inputs` are canonical ids (the
    engine resolves aliases, see `same_values_as`), so that x - positive(x) cancels too."""
    if op.name in _CLASS_TEST_VALUE:
        return True
    if len(inputs) == 2 and inputs[0] == inputs[1] and (_self_cancels(op) or _self_divides(op)):
        return True
    if op.name == "frac" and ins and ins[0].integral:
        return True
    if ((op.name in _POWERS and _zero_base_power(op, ins)) or (op.name in _SHRINKS and _shrunk_away(op, ins))
            or (op.name == "xlogy" and _xlogy_of_bits(ins))):
        return True
    if op.name == "pairwise_distance" and len(inputs) == 2 and inputs[0] == inputs[1]:
        return True  # ||x - x + eps||: the same whatever x
    if op.name in ("addcmul", "addcdiv") and _number(op.attrs.get("value"), 1.0) == 0 and ins and ins[0].fixed:
        return True  # x + 0 * ...: x
    return bool(ins) and all(f.fixed for f in ins)


def _running_var_at(op: type[OpSpec] | OpSpec) -> int | None:
    """Where the running variance is, for a norm instance that divides by sqrt(var + eps) with it
    (batch_norm in eval mode, instance_norm without input statistics); None otherwise."""
    a, k = getattr(op, "attrs", None), len(getattr(op, "in_sigs", ()))
    if a is None or a.get("eps") is None:
        return None
    if op.name == "batch_norm" and not a.get("training") and k >= 3:
        return 2
    if op.name == "instance_norm" and not a.get("use_input_stats") and a.get("layout") in ("stats", "both"):
        return 2
    return None


def _variance_never_positive(f: Facts, eps: float) -> bool:
    """var + eps <= 0 in practice: var is below -eps, or is negative with 0 met only in saturation
    (logsigmoid(w)) and eps too small for var to land in (-eps, 0) short of saturation."""
    hi = _practical(f)[1]
    return hi <= -eps or (f.hi_limit and hi <= 0 and eps <= 1e-3)


def hopeless(op: type[OpSpec] | OpSpec, ins: list["Facts"]) -> bool:
    """A vulnerable op that no value makes finite: all its operands (or its divisor) fixed by the
    graph, a divisor that holds a 0, a running variance that is never above -eps, or an operand
    whose facts lie outside the op's domain."""
    if not op.vulnerable or not ins:
        return False
    if all(f.fixed for f in ins):
        return True
    pos = _DIVISOR_AT.get(op.name)
    if pos is not None and len(ins) == 1 and getattr(op, "attrs", {}).get("form") == "rop":
        pos = 0  # `s % x`: the tensor is the divisor
    if pos is not None and pos < len(ins):
        d = ins[pos]
        if d.fixed or d.zero or d.holds == 0 or _practical(d) == (0, 0):
            return True
        points = value_set(d)
        if points is not None and 0.0 in points and len(points) <= 2:  # x / mask: every element must be the other value
            return True
    if op.name in _OVERFLOWS and _always_overflows(op, ins[0]):
        return True
    if op.name == "xlogy" and len(ins) == 2 and _negative_somewhere(ins[1]) and not ins[0].integral:
        return True  # x * log(y < 0) is NaN unless x is exactly 0
    if op.name == "xlogy" and len(ins) == 2 and ins[1].hi <= 0 and _never_zero(ins[0]):
        return True  # x * log(y <= 0) is -inf or NaN wherever x is not 0
    if op.name in ("lp_pool1d", "lp_pool2d") and _negative_power_sum(op, ins[0]):
        return True
    var_at = _running_var_at(op)
    if var_at is not None and var_at < len(ins) and _variance_never_positive(ins[var_at], op.attrs["eps"]):
        return True
    if op.name in _POWERS and ins and _negative_somewhere(ins[0]) and _fractional_exponent(op, ins):
        return True  # a negative base to a fractional power is NaN
    if op.name in _POWERS and ins and (ins[0].zero or ins[0].lo == ins[0].hi == 0) and _negative_exponent(op, ins):
        return True  # 0 ** -k is inf
    if op.name == "logit" and getattr(op, "attrs", {}).get("eps") not in (None, 0.0):
        if _eps_lost_at_one(op):  # the clamp's top, 1 - eps, rounds to 1: logit(1) is inf
            f = ins[0]
            return f.lo >= 1 or (f.holds is not None and f.holds >= 1)
        return False  # clamped into the domain
    return op.name in _DOMAIN and _never_finite(op.name, ins[0])

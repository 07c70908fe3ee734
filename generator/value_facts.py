"""What the graph alone guarantees about a value ("facts"), and which vulnerable ops they doom.

Value search can repair a program only if some finite inputs make every intermediate finite. A
vulnerable op whose operand facts leave no such value (acosh(tanh(x)), lgamma(argsort(x)), log of
a training-mode batch_norm, rsqrt(x - x)) is non-finite whatever the inputs, so the generator asks
`hopeless(...)` before inserting one and does not build it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from nnforge.core.dtypes import INT_DTYPE_RANGES, int_search_range, is_float
from nnforge.generator.spec import OpSpec
from nnforge.generator.specs.nn_arith import MAX_CHANNELS


# Values fixed by the graph alone, whatever the inputs and weights (as long as they are finite,
# which value search needs anyway): class tests, and ops applied to one value twice where the
# result cancels (x - x, x % x, x ^ x, x != x). A vulnerable op fed only fixed values (or a
# fixed divisor) is non-finite for every value or for none (rsqrt(isinf(x)), log(x - x)), so
# no value search can repair it; the generator does not build it.
_FIXED_RESULT = frozenset({"isinf", "isnan", "isposinf", "isneginf", "isfinite", "isreal"})
_SELF_CANCELLING = frozenset({"sub", "fmod", "remainder", "bitwise_xor", "logical_xor",
                              "eq", "ne", "gt", "ge", "lt", "le", "isclose"})
_DIVISOR_AT = {"div": 1, "div_promote": 1, "div_rounding": 1, "fmod": 1, "remainder": 1, "addcdiv": 2}
# What a self-cancelling op gives on one value twice (on finite values; x % x is NaN at 0 only).
_SELF_CANCELLED_VALUE = {"sub": 0.0, "fmod": 0.0, "remainder": 0.0, "bitwise_xor": 0.0, "logical_xor": 0.0,
                         "eq": 1.0, "ne": 0.0, "gt": 0.0, "ge": 1.0, "lt": 0.0, "le": 1.0, "isclose": 1.0}
# Ops that return one input's values unchanged (same shape, same order): the engine tracks such
# aliases, so that fmod(x, positive(x)) cancels like fmod(x, x). Dropout specs are eval-mode only.
# (nan_to_num too: value search makes every intermediate finite, where it changes nothing)
_IDENTITY = frozenset({"positive", "contiguous", "dropout", "nan_to_num"})
_SAME_OF_TWO = frozenset({"maximum", "minimum", "fmax", "fmin", "nextafter"})  # op(x, x) is x


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
    fixed: bool = False  # the same whatever the inputs (see _FIXED_RESULT)
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


def _safe(f, x: float) -> float:
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


_INCREASING = {  # monotone non-decreasing unary ops (where finite)
    "exp": math.exp, "exp2": lambda x: 2.0 ** x, "expm1": math.expm1, "tanh": math.tanh,
    "sigmoid": _sigmoid, "erf": math.erf, "atan": math.atan, "asinh": math.asinh, "sinh": math.sinh,
    "softsign": lambda x: math.copysign(1.0, x) if math.isinf(x) else x / (1 + abs(x)), "deg2rad": math.radians, "rad2deg": math.degrees,
    "relu": lambda x: max(x, 0.0), "positive": lambda x: x, "floor": math.floor, "ceil": math.ceil,
    "trunc": math.trunc, "sqrt": lambda x: math.sqrt(max(x, 0.0)), "asin": lambda x: math.asin(min(max(x, -1.0), 1.0)),
    "log": lambda x: math.log(x) if x > 0 else -INF, "log2": lambda x: math.log2(x) if x > 0 else -INF,
    "log10": lambda x: math.log10(x) if x > 0 else -INF, "log1p": lambda x: math.log1p(x) if x > -1 else -INF,
    "logsigmoid": lambda x: -_safe(lambda y: math.log1p(math.exp(-y)), x),
    "acosh": lambda x: math.acosh(max(x, 1.0)),  # where finite (x >= 1)
    "atanh": lambda x: math.atanh(x) if -1 < x < 1 else math.copysign(INF, x),  # where finite (|x| < 1)
    "erfinv": lambda x: _erfinv(x),
    # steps: sgn of a uint8 is 0 or 1, not [-1, 1] (whose -1 would wrap to 255)
    "sgn": lambda x: float((x > 0) - (x < 0)), "sign": lambda x: float((x > 0) - (x < 0)),
}
_DECREASING = {"neg": lambda x: -x, "erfc": math.erfc, "acos": lambda x: math.acos(min(max(x, -1.0), 1.0)),
               # where finite (x > 0); an operand reaching 0 or below leaves no upper bound
               "rsqrt": lambda x: 1.0 / math.sqrt(x) if x > 0 else INF}
# Bounded results of unbounded operands that approach their bounds only asymptotically.
# (exp tends to 0 too, but reaches it by underflow well within float range: sqrt(-exp(x)) is kept.)
_SATURATING = frozenset({"tanh", "sigmoid", "erf", "erfc", "atan", "softsign", "logsigmoid"})
# What each saturating op tends to at -inf and +inf: a result bound equal to one of these is met
# only in saturation, however far the operand reaches (tanh of a uint8 is 1.0 only from ~9 on).
_ASYMPTOTES = {"tanh": (-1.0, 1.0), "sigmoid": (0.0, 1.0), "erf": (-1.0, 1.0), "erfc": (2.0, 0.0),
               "atan": (-math.pi / 2, math.pi / 2), "softsign": (-1.0, 1.0), "logsigmoid": (-INF, 0.0)}
# Strictly increasing (or decreasing) and continuous: a limit of the operand maps to a limit.
_STRICT = frozenset({"exp", "exp2", "expm1", "tanh", "sigmoid", "erf", "atan", "asinh", "sinh", "softsign",
                     "deg2rad", "rad2deg", "positive", "neg", "erfc", "log", "log2", "log10", "log1p",
                     "logsigmoid", "rsqrt", "bitwise_not", "atanh", "erfinv"})
_DIGAMMA_1 = -0.5772156649015329  # digamma(1); digamma increases on (0, inf)
_SINC_MIN = -0.22  # sin(pi x) / (pi x) is -0.217234 at its least (x = +-1.4303); room for bfloat16 rounding
_RANGE = {  # output bounds whatever the input
    "sin": (-1, 1), "cos": (-1, 1), "sgn": (-1, 1), "sign": (-1, 1), "hardsigmoid": (0, 1), "relu6": (0, 6),
    "softmax": (0, 1), "log_softmax": (-INF, 0), "logsigmoid": (-INF, 0), "acos": (0, math.pi),
    "asin": (-math.pi / 2, math.pi / 2), "atan2": (-math.pi, math.pi), "cosh": (1, INF), "i0": (1, INF),
    "softplus": (0, INF), "square": (0, INF), "frac": (-1, 1), "count_nonzero": (0, INF),
    "sinc": (_SINC_MIN, 1),  # 1 at 0 only; the least value is near x = 1.43
}
_INTEGRAL_RESULT = frozenset({"floor", "ceil", "trunc", "sgn", "sign", "count_nonzero", "bitwise_not"})
_KEEPS_INTEGRAL = frozenset({"relu", "relu6", "positive", "neg", "abs", "square", "hardtanh", "clamp"})
# Same elements (maybe reordered, repeated or reshaped): every fact carries over.
_REARRANGE = frozenset({"contiguous", "flip", "roll", "permute", "transpose", "t", "movedim", "reshape", "view",
                        "flatten", "unflatten", "squeeze", "unsqueeze", "expand", "expand_as", "repeat", "tile",
                        "pixel_shuffle", "pixel_unshuffle", "dropout"})
# Some of the elements: bounds carry over, "holds a ..." facts do not.
_SUBSET = frozenset({"narrow", "slice", "select", "chunk", "split", "tensor_split", "unbind", "diagonal", "gather",
                     "index_select", "take_along_dim", "max_min", "amax_amin", "aminmax", "median", "kthvalue",
                     "mode", "sort", "topk", "cummax_cummin", "max_pool1d", "max_pool2d", "max_pool3d",
                     "adaptive_max_pool1d", "adaptive_max_pool2d"})
# Within the hull of the inputs (0 included, for padded averages).
_HULL = frozenset({"cat", "stack", "mean", "avg_pool1d", "avg_pool2d",
                   "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d"})
# Second outputs that are indices (argsort and argmax/argmin are the first and only).
_INDEX_AT_1 = frozenset({"sort", "topk", "max_min", "median", "kthvalue", "mode", "cummax_cummin", "max_pool1d",
                         "max_pool2d", "max_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d"})
_INDEX = Facts(0.0, INF, integral=True, zero=True)
_CLASS_TEST_VALUE = {"isinf": 0.0, "isnan": 0.0, "isposinf": 0.0, "isneginf": 0.0, "isfinite": 1.0, "isreal": 1.0}


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


# Elementwise ops with f(0) = 0: a zero their operand holds survives them.
_ZERO_AT_ZERO = frozenset({"relu", "relu6", "positive", "neg", "abs", "square", "sgn", "sign", "trunc", "round",
                           "floor", "ceil", "sinh", "tanh", "sin", "tan", "atan", "asinh", "erf", "softsign",
                           "deg2rad", "rad2deg", "sqrt", "expm1", "hardswish", "silu", "gelu", "mish", "elu", "selu",
                           "celu", "leaky_relu", "rrelu", "softshrink", "hardshrink", "tanhshrink", "atanh", "erfinv",
                           "contiguous", "dropout"})


def _unary_facts(op: OpSpec, f: Facts) -> Facts | None:
    """Facts of an elementwise unary result from its operand's, None when nothing is known."""
    name, a = op.name, op.attrs
    if name == "softplus" and not (_number(a.get("beta"), 1.0) > 0 and _number(a.get("threshold"), 20.0) >= 0):
        return None  # its linear branch returns x itself where beta * x > threshold: x < 0 too
    fn = _INCREASING.get(name)
    dec = _DECREASING.get(name) or (_bitwise_not_fn(op) if name == "bitwise_not" else None)
    if name == "hardtanh":
        fn = _clamp_fn(_number(a.get("min_val"), -1.0), _number(a.get("max_val"), 1.0))
    elif name == "clamp":
        fn = _clamp_fn(_number(a.get("min"), -INF), _number(a.get("max"), INF))
    elif name == "round" and a.get("decimals") in (None, 0):
        fn = round
    elif name == "round" and isinstance(a.get("decimals"), int):
        fn = _round_fn(a["decimals"])
    elif name == "rrelu":  # eval mode: a leaky relu with the mean slope
        slope = (_number(a.get("lower"), 1 / 8) + _number(a.get("upper"), 1 / 3)) / 2
        fn = (lambda x: x if x >= 0 else slope * x) if slope >= 0 else None
    elif name in _SHRINKS:
        fn = _shrink_fn(op)
    elif name == "leaky_relu":
        slope = _number(a.get("negative_slope"), 0.01)
        fn = (lambda x: x if x >= 0 else slope * x if slope else 0.0) if slope >= 0 else None  # non-decreasing
    lo_limit = hi_limit = False
    if fn is not None:
        lo, hi = _safe(fn, f.lo), _safe(fn, f.hi)
        # floor(0 + tiny) is 0, attained; floor(1 - tiny) is 0 too: 1 stays out of reach (ceil mirrors)
        lo_limit = _limit(name, f.lo, f.lo_limit, lo, -INF) and name not in ("floor", "round", "trunc", "sgn", "sign")
        hi_limit = _limit(name, f.hi, f.hi_limit, hi, INF) and name not in ("ceil", "round", "trunc", "sgn", "sign")
        if name in _SHRINKS:  # a limit survives outside the dead zone only: values near it become 0
            lambd = _number(a.get("lambd"), 0.5)
            lo_limit, hi_limit = f.lo_limit and abs(f.lo) > lambd, f.hi_limit and abs(f.hi) > lambd
    elif dec is not None:
        lo, hi = _safe(dec, f.hi), _safe(dec, f.lo)
        lo_limit = _limit(name, f.hi, f.hi_limit, lo, INF)
        hi_limit = _limit(name, f.lo, f.lo_limit, hi, -INF)
    elif name == "digamma" and f.lo >= 0 and f.hi <= 1:  # softmax, sigmoid: digamma below digamma(1)
        lo, hi = -INF, _DIGAMMA_1
    elif name == "abs":
        lo, hi = _abs_bounds(f)
    elif name == "threshold":
        th, val = _number(a["threshold"], math.nan), _number(a["value"], math.nan)
        if math.isnan(th) or math.isnan(val):
            return None
        if f.lo > th:
            lo, hi = f.lo, f.hi
        elif f.hi > th:
            lo, hi = min(val, th), max(val, f.hi)
        else:
            lo = hi = val
    elif name in _RANGE:
        lo, hi = _RANGE[name]
    else:
        return None
    if name in _RANGE:
        lo2, hi2 = max(lo, _RANGE[name][0]), min(hi, _RANGE[name][1])
        lo_limit, hi_limit = lo_limit and lo2 == lo, hi_limit and hi2 == hi
        lo, hi = lo2, hi2
    integral = name in _INTEGRAL_RESULT or (name == "round" and (a.get("decimals") or 0) <= 0) or (f.integral and name in _KEEPS_INTEGRAL)
    keeps_zero = f.zero and name in _ZERO_AT_ZERO
    symmetric = name in ("neg", "positive")  # a standardised value stays standardised
    # an element <= f.at_most stays <= fn(f.at_most) through a non-decreasing op
    at_most = _safe(fn, f.at_most) if fn is not None and f.at_most is not None else None
    out = Facts(float(lo), float(hi), integral=integral, zero=keeps_zero, lo_limit=lo_limit, hi_limit=hi_limit,
                centered=symmetric and f.centered, unit=symmetric and f.unit,
                at_most=at_most if at_most is not None and math.isfinite(at_most) else None)
    mapped = _mapped_values(name, fn or dec, f)
    if mapped is not None:
        few = len(value_set(f) or ()) <= 5  # (a 0 among more values is not claimed to be met)
        out = replace(out, lo=min(mapped), hi=max(mapped), values=mapped, zero=0.0 in mapped and len(mapped) > 1 and few)
    return out


# Elementwise ops whose value on a known point is worth computing (besides the monotone ones).
_POINTWISE = {
    "abs": abs, "sign": lambda x: float((x > 0) - (x < 0)), "sgn": lambda x: float((x > 0) - (x < 0)),
    "sin": math.sin, "cos": math.cos, "cosh": math.cosh, "i0": lambda x: _i0(x),
    "square": lambda x: x * x, "frac": lambda x: x - math.trunc(x),
    "sinc": lambda x: 1.0 if x == 0 else math.sin(math.pi * x) / (math.pi * x),
}
_MAX_VALUES = 7  # relu6 of an integer: 0..6


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
    fn = fn or _POINTWISE.get(name)
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
        return name in _SATURATING
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


_PRODUCTS = frozenset({"mul", "mul_promote", "mm", "bmm", "matmul", "einsum", "linear"})  # zero if an operand is all zeros


ELEMENTWISE_MIN = frozenset({"minimum", "minimum_promote", "fmin"})
ELEMENTWISE_MAX = frozenset({"maximum", "maximum_promote", "fmax"})


def _right_shift_facts(op: OpSpec, f: Facts) -> Facts:
    """x >> k is floor(x / 2 ** k): by a scalar k, the bounds shifted; by a tensor (wrapped into
    [0, bits)), anywhere from x itself to 0 (or -1 for negative x)."""
    k = _number(op.attrs.get("scalar"), math.nan) if "scalar" in op.attrs else math.nan
    if not math.isnan(k) and k >= 0:
        return Facts(_floor(f.lo / 2 ** k), _floor(f.hi / 2 ** k), integral=True)
    return Facts(f.lo if f.lo < 0 else 0.0, f.hi if f.hi >= 0 else -1.0, integral=True)


# Bitwise ops with a scalar that decides every bit of the result.
_ABSORBING = {"bitwise_or": -1.0, "bitwise_and": 0.0}


# Unary ops that are <= 0 wherever their operand is (a value <= 0 held stays one).
_SIGN_KEEPING = frozenset({"relu", "relu6", "mish", "silu", "gelu", "hardswish", "softsign", "tanh", "sinh", "asinh",
                           "atan", "erf", "expm1", "positive", "trunc", "floor", "round", "sgn", "sign", "deg2rad",
                           "rad2deg", "tanhshrink", "hardshrink", "softshrink", "selu"})


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


def _is_index_output(op: OpSpec, pos: int) -> bool:
    name = op.name
    return (pos == 1 and name in _INDEX_AT_1) or name == "argmax_argmin" or (
        name == "sort" and op.attrs.get("fn") == "argsort")


# -- facts known once shapes are solved ------------------------------------------------------
# Ops along a dim (or dims) whose result is a constant when that dim has size 1: softmax is 1,
# log_softmax 0, and every index (argsort, argmax, the indices of max/median/sort/topk) is 0;
# and count_nonzero, which is then 0 or 1 (a reader that needs more grows the size too).
SIZE_ONE_OPS = frozenset({"softmax", "log_softmax", "sort", "argmax_argmin", "max_min", "median", "mode",
                          "kthvalue", "topk", "cummax_cummin", "std_var", "layer_norm", "count_nonzero"})
# Ops along a dim whose facts the number of elements along it sharpens (SIZE_ONE_OPS, and
# logsumexp: at least lo + ln n over n elements, though over one it is x itself).
SIZED_OPS = SIZE_ONE_OPS | {"logsumexp", "normalize"}


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
    if op.name == "log_softmax" or _is_index_output(op, pos):
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
    if _is_index_output(op, pos):
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
    name = op.name
    outs: list[Facts] = []
    for pos, dt in enumerate(out_dtypes):
        base = dtype_facts(dt)
        f: Facts | None = _size_one_facts(op, pos, concrete, ins) if concrete is not None else None
        constant = f is not None and f.fixed  # fixed whatever the inputs, though they are not
        if f is not None:
            pass
        elif same_operands and _self_cancels(op):
            v = _SELF_CANCELLED_VALUE[name]
            f = Facts(v, v, integral=True, zero=v == 0)
        elif same_operands and _self_divides(op):
            f = Facts(1.0, 1.0, integral=True, values=(1.0,))  # x / x: 1 wherever finite (NaN at 0)
        elif name == "frac" and ins and ins[0].integral:
            f = Facts(0.0, 0.0, integral=True, zero=True)  # x - trunc(x) of a whole number
        elif _is_index_output(op, pos):
            f = _INDEX
        elif name == "signbit" and ins and (ins[0].lo > 0 or ins[0].hi < 0):  # (-0.0 has it set: no 0 here)
            v = float(ins[0].hi < 0)
            f = Facts(v, v, integral=True, zero=v == 0)
        elif name in _CLASS_TEST_VALUE:  # on finite values (all value search accepts)
            v = _CLASS_TEST_VALUE[name]
            f = Facts(v, v, integral=True, zero=v == 0)
        elif not ins:
            f = None
        elif name.startswith("to_") or name == "type_as":
            f = ins[0] if is_float(dt) else None if dt == "bool" else _cast_to_int_facts(ins[0], dt)
        elif name in _REARRANGE or name == "nan_to_num":
            f = ins[0]
        elif name in _SUBSET:
            f = _subset_facts(op, pos, ins[0])
        elif name == "atan2" and len(ins) == 2:
            f = _atan2_of_itself(ins[0]) if same_operands else _atan2_facts(*ins)
        elif name == "heaviside" and len(ins) == 2:
            f = _heaviside_facts(*ins)
        elif name in ("addcmul", "addcdiv") and _number(op.attrs.get("value"), 1.0) == 0:
            f = ins[0]  # x + 0 * (t1 * t2): x wherever finite
        elif name == "addcmul" and len(ins) == 3:
            f = _addcmul_facts(op, ins, same_operands, dt)
        elif name == "pairwise_distance":
            eps = _number(op.attrs.get("eps"), 1e-6)
            f = Facts(0.0, 0.0, integral=True, zero=True) if same_operands and eps == 0 else Facts(0.0, INF)
        elif name == "std_var" and pos == 0 and ins[0].lo == ins[0].hi:
            f = Facts(0.0, 0.0, integral=True, zero=True)  # the spread of one repeated value
        elif name == "std_var" and pos == 0:
            f = Facts(0.0, INF)
        elif name in _SAME_OF_TWO and same_operands:
            f = ins[0]  # min(x, x) is x, and so is nextafter(x, x)
        elif name in ("addmm", "baddbmm") and _number(op.attrs.get("alpha"), 1.0) == 0:
            beta = _number(op.attrs.get("beta"), 1.0)  # beta * input + 0 * (m1 @ m2); beta 0 ignores the input
            f = Facts(0.0, 0.0, integral=True, zero=True) if beta == 0 else _scalar_facts(_ScalarOp("mul", {"scalar": beta}), ins[0])
        elif name in ("lp_pool1d", "lp_pool2d") and ins and ins[0].lo >= 0:
            f = Facts(ins[0].lo, INF)  # (sum x ** p) ** (1 / p) is at least the window's largest x
        elif name in ELEMENTWISE_MIN or name in ELEMENTWISE_MAX:  # elementwise min/max: tighter than the hull
            f = _min_max_facts(name in ELEMENTWISE_MIN, ins)
        elif name == "gcd" and len(ins) == 2 and min(ins[0].lo, ins[1].lo) > _INT_RANGES.get(dt, (-INF,))[0]:
            m = max(abs(ins[0].lo), abs(ins[0].hi), abs(ins[1].lo), abs(ins[1].hi))
            f = Facts(0.0, m, integral=True)  # never negative (but gcd(-128, 0) is -128 in int8)
        elif name == "bitwise_right_shift":
            f = _right_shift_facts(op, ins[0])
        elif name.startswith("avg_pool") and op.attrs.get("divisor_override") is not None:
            f = _sum_facts(ins[0])  # a window sum divided by a fixed number (1, say): the sign is all that is left
        elif name == "where" and ins and ins[0].lo == ins[0].hi and ins[0].lo in (0.0, 1.0):
            f = _where_branch(op, ins, taken=ins[0].lo == 1.0)
        elif name == "vector_norm":
            f = _norm_facts(op.attrs.get("ord"), ins[0])
        elif name == "interpolate" and op.attrs.get("mode") != "bicubic":  # weights >= 0 that sum to 1
            f = _hull(ins[:1], averaged=not str(op.attrs.get("mode")).startswith("nearest"))
        elif name in _HULL:
            f = _hull(ins, with_zero=name.startswith("avg_pool"), averaged=name not in ("cat", "stack"))
            if name in ("cat", "stack"):
                f = Facts(f.lo, f.hi, f.integral, zero=any(g.zero for g in ins),
                          centered=any(g.centered for g in ins), unit=any(g.unit for g in ins))
        elif name in _PRODUCTS and any(g.lo == g.hi == 0 for g in ins) and not (name == "linear" and len(ins) > 2):
            f = Facts(0.0, 0.0, integral=True)
        elif len(ins) == 1 and name in _ABSORBING and _number(op.attrs.get("scalar"), math.nan) == _ABSORBING[name]:
            v = _ABSORBING[name]  # x | -1 is -1, x & 0 is 0, whatever x
            f = Facts(v, v, integral=True, zero=v == 0)
        elif len(ins) == 1 and "scalar" in op.attrs and name in ("mul", "div", "div_promote", "fmod", "remainder", "xlogy"):
            f = _scalar_facts(op, ins[0])
            if f is not None and name in ("fmod", "remainder") and ins[0].zero and op.attrs.get("form") != "rop":
                f = replace(f, zero=True)  # 0 % s is 0
        elif len(ins) == 2 and name in ("fmod", "remainder"):
            f = _modulo_facts(name, *ins)
        elif name in _BITWISE and dt in _INT_RANGES and (len(ins) == 2 or "scalar" in op.attrs):
            f = _bitwise_facts(op, ins)
        elif name == "float_scalar_promote" and op.attrs.get("op") in _PROMOTED_AS:
            f = _scalar_facts(_ScalarOp(_PROMOTED_AS[op.attrs["op"]], {
                "scalar": op.attrs.get("scalar"), "form": "rop" if op.attrs.get("reflected") else None}), ins[0])
        elif name in ("sum", "nansum", "cumsum_cumprod") and op.attrs.get("fn", "cumsum") in ("cumsum", "sum", "nansum"):
            f = _sum_facts(ins[0])
        elif name == "prod" or (name == "cumsum_cumprod" and op.attrs.get("fn") == "cumprod"):
            f = _product_facts(ins[0], dt)
        elif name in ("logaddexp", "logaddexp2") and len(ins) == 2:  # between max(a, b) and that + ln 2 (+ 1)
            top = max(ins[0].hi, ins[1].hi) + (math.log(2.0) if name == "logaddexp" else 1.0)
            f = Facts(max(ins[0].lo, ins[1].lo), top + 1e-3 * abs(top) if math.isfinite(top) else INF)
        elif name == "logcumsumexp":  # at least each running maximum; the first equals its element
            g = ins[0]
            f = Facts(g.lo, INF, at_most=g.hi if math.isfinite(g.hi) else None)
        elif name == "logsumexp":
            g = ins[0]  # at least the greatest element (at least lo + ln n over n elements, see _sized_facts)
            f = Facts(g.lo, INF) if g.lo > -INF else None
        elif name == "pad":
            g = ins[0]
            if op.attrs.get("mode") == "constant":
                v = _number(op.attrs.get("value"), 0.0)
                f = None if math.isnan(v) else Facts(min(g.lo, v), max(g.hi, v), g.integral and float(v).is_integer(),
                                                     holds=v if _pads_something(op, concrete) else None)
            else:  # reflect, replicate, circular: copies of the operand's own elements, all of them kept
                f = g
        elif name == "tril_triu":
            g = ins[0]
            f = Facts(min(g.lo, 0.0), max(g.hi, 0.0), g.integral, zero=triangle_drops(op, concrete))
        elif name == "normalize":
            f = _normalize_facts(op, ins[0])
        elif name == "local_response_norm":
            f = _lrn_facts(op, ins[0], dt)
        elif name in ("batch_norm", "instance_norm", "layer_norm", "group_norm", "rms_norm"):
            centered, unit = _standardised(op)
            f = Facts(centered=centered, unit=unit)
        elif len(ins) == 1 and "scalar" in op.attrs and name in ("add", "sub", "rsub"):
            f = _shift_facts(op, ins[0], dt)
        elif len(ins) == 2 and name in ("add", "sub"):
            f = _sum_of_two(op, ins, dt)
        elif name == "copysign" and _sign_of_copysign(op, ins) is not None:
            f = _copysign_facts(ins[0], _sign_of_copysign(op, ins))  # (the scalar form is copysign(x, s) only)
        elif name == "copysign" and len(ins) == 2 and value_set(ins[0]) is not None:
            mags = {abs(v) for v in value_set(ins[0])}  # |x| with y's sign, which the graph leaves open
            points = tuple(sorted(mags | {-m for m in mags}))
            f = Facts(min(points), max(points), integral=ins[0].integral, values=points) if len(points) <= _MAX_VALUES else None
        elif name == "xlogy" and _xlogy_of_bits(ins):
            f = Facts(0.0, 0.0, integral=True, zero=True)
        elif name in _SHRINKS and _shrunk_away(op, ins):
            f = Facts(0.0, 0.0, integral=True, zero=True)
        elif name in _POWERS and _zero_base_power(op, ins):
            f = Facts(0.0, 0.0, integral=True, zero=True)
        elif len(ins) == 1 and "scalar" in op.attrs and name in _POWERS:
            f = _scalar_power_facts(op, ins[0], dt)
        elif len(ins) == 1 and "scalar" in op.attrs and name == "div_rounding":
            f = _floor_div_facts(op, ins[0])
        elif len(ins) == 2 and name == "div_rounding":
            f = Facts(integral=True)  # a rounded quotient: a whole number wherever finite
        elif len(ins) == 2 and name in ("mul", "mul_promote"):
            lo, hi = _product_bounds(ins[0], ins[1], same_operands)
            f = Facts(lo, hi, integral=ins[0].integral and ins[1].integral, zero=ins[0].zero or ins[1].zero)
            if dt in _INT_RANGES and not (math.isfinite(lo) and math.isfinite(hi)):
                f = None  # an unbounded integer product may wrap around: only the dtype is known
        elif name == "logit" and len(ins) == 1 and _logit_facts(op) is not None:
            f = _logit_facts(op)
        elif name == "square" and dt in _INT_RANGES and not _fits_square(ins[0], dt):
            f = None  # an integer square beyond the dtype wraps around (int8 16 * 16 is 0)
        elif len(ins) == 1 or name in ("hardtanh", "clamp", "threshold"):
            f = _unary_facts(op, ins[0])
            if f is not None and name == "log_softmax":
                f = replace(f, negative=True)
        f = base if f is None else f
        if len(ins) == 1 and ins[0].zero and name in _ZERO_AT_ZERO and not f.zero:  # tril(x) -> hardswish
            f = replace(f, zero=True)
        if len(ins) == 1 and name in _SIGN_KEEPING and not f.nonpos and _holds_nonpositive(ins[0]):
            f = replace(f, nonpos=True)  # log(mish(instance_norm(x))): mish is <= 0 where x is
        rng = _INT_RANGES.get(dt)
        wraps = rng is not None and (rng[0] > f.lo > -INF or INF > f.hi > rng[1] or (rng[0] == 0 and f.lo < 0))
        if wraps and not name.startswith("to_"):
            f = base  # an integer result beyond its dtype wraps around (neg of a uint8): nothing known
        elif f.lo < base.lo or f.hi > base.hi:  # dtype bounds are tighter (a cast, a bool result)
            f = Facts(max(f.lo, base.lo), min(f.hi, base.hi), f.integral or base.integral, f.zero, f.centered, f.unit,
                      f.fixed)
        if f.lo > f.hi or math.isnan(f.lo) or math.isnan(f.hi):  # wrong somewhere (contradiction, inf/inf): know nothing
            f = base
        if fixed != f.fixed and not constant:
            f = replace(f, integral=f.integral or base.integral, fixed=fixed)
        elif base.integral and not f.integral:
            f = replace(f, integral=True)
        if pos == 0 and len(out_dtypes) == 1 and len(ins) == 1 and _elementwise(op):
            f = _through_points(op, ins[0], f, dt)
        if f.lo == f.hi and math.isfinite(f.lo) and not f.fixed:  # one value wherever finite: a constant
            f = replace(f, fixed=True)
        continuous = is_float(dt) and _keeps_continuous(op, ins) and not f.fixed
        if f.continuous != continuous:
            f = replace(f, continuous=continuous)
        outs.append(f)
    return outs


# Elementwise ops of one tensor operand (their scalar forms included): a value the operand holds,
# or each of the few it takes, maps to a point of the result (see `_through_points`).
_ELEMENTWISE_1 = (frozenset(_INCREASING) | frozenset(_DECREASING) | frozenset(_POINTWISE) | _ZERO_AT_ZERO
                  | {"hardtanh", "clamp", "threshold", "round", "logit", "hardsigmoid", "relu6", "bitwise_not",
                     "add", "sub", "rsub", "mul", "div", "div_promote", "div_rounding", "fmod", "remainder",
                     "pow", "float_power", "float_scalar_promote", "bitwise_and", "bitwise_or", "bitwise_xor",
                     "xlogy", "rrelu", "leaky_relu"})


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


# Ops whose float results are exactly 0 only where a continuous operand is (or on a point of it):
# the same elements, or injective elementwise ops.
# (Not exp, sigmoid, erfc: they underflow to 0; not log: log(1) is 0, and a bfloat16 input holds
# an exact 1 now and then.)
_KEEPS_CONTINUOUS = _REARRANGE | _SUBSET | {"neg", "positive", "tanh", "sinh", "asinh", "atan", "erf", "softsign",
                                            "sin", "tan", "cos", "copysign",  # cos of a float is never 0, sin only at 0
                                            "deg2rad", "rad2deg", "expm1", "log1p", "mul", "type_as"}


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


_BITWISE = frozenset({"bitwise_and", "bitwise_or", "bitwise_xor"})


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


# Where a vulnerable unary op is finite: (lo, hi, lo open, hi open); `_POLE_AT_ZERO` adds x = 0
# (and for lgamma/digamma every non-positive integer).
_DOMAIN = {
    "log": (0, INF, True, False), "log2": (0, INF, True, False), "log10": (0, INF, True, False),
    "rsqrt": (0, INF, True, False), "log1p": (-1, INF, True, False), "sqrt": (0, INF, False, False),
    "acos": (-1, 1, False, False), "asin": (-1, 1, False, False), "atanh": (-1, 1, True, True),
    "erfinv": (-1, 1, True, True), "acosh": (1, INF, False, False), "logit": (0, 1, True, True),
    "reciprocal": (-INF, INF, False, False), "lgamma": (-INF, INF, False, False),
    "digamma": (-INF, INF, False, False),
}
_POLE_AT_ZERO = frozenset({"reciprocal", "lgamma", "digamma"})


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
        if name in ("lgamma", "digamma"):
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
    return not (name in _POLE_AT_ZERO and x <= 0 and (x == 0 or (name != "reciprocal" and float(x).is_integer())))


def _self_cancels(op: OpSpec) -> bool:
    return op.name in _SELF_CANCELLING and op.attrs.get("alpha") in (None, 1)


# Divisions whose result on one value twice is 1 wherever finite: x / x, x // x, trunc(x / x).
_SELF_DIVIDING = frozenset({"div", "div_promote", "div_rounding"})


def _self_divides(op: type[OpSpec] | OpSpec) -> bool:
    return op.name in _SELF_DIVIDING and "scalar" not in getattr(op, "attrs", {})


_POWERS = frozenset({"pow", "float_power", "pow_promote"})  # (pow_promote: tensors of two dtypes)
_SHRINKS = frozenset({"hardshrink", "softshrink"})


# Where exp-like ops overflow: ln (log2 for exp2) of the result dtype's largest finite value;
# sinh and cosh overflow beyond that plus ln 2, on either side.
_LN_MAX = {"float16": math.log(65504.0), "bfloat16": math.log(3.3895e38), "float32": math.log(3.4028e38),
           "float64": math.log(1.7976e308)}
_OVERFLOWS = frozenset({"exp", "expm1", "exp2", "sinh", "cosh"})


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
    if op.name in _FIXED_RESULT:
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

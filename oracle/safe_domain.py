"""Safe domains of operators, written as losses on an operator's *inputs*.

Value search (oracle/value_search/) runs a program, finds the first operator whose output is not
finite, and takes a gradient step on that operator's loss from this table. A loss is zero when
every input lies inside the operator's safe domain with a margin, and grows with the distance
outside it, so that gradient descent walks the inputs (and through them the model's inputs and
weights) back into the domain. Operators not in the table get `magnitude_loss`: most remaining
non-finite results are overflows, which shrinking magnitudes cures. Where an operator's domain is
an interval or a set of poles, its bounds are the generator's numerics records (numerics.py),
the ones value facts reads: the losses here say only how to push a value inside.

This module also names the operators whose true gradient is zero almost everywhere (floor,
relu's flat side, clamp outside its range, ...). Value search gives them a straight-through
gradient, and gives casts to integer and comparisons a float "shadow", so that a culprit fed
through them can still be repaired by gradient.

Names are canonical operator names (`canonical_name`): `torch.log`, `Tensor.log`, `Tensor.log_`
all read `log`; `a / b` reads `div`, `1 / x` reads `rdiv`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from nnforge.generator.numerics import Interval, numerics, ops_where

LossFn = Callable[[tuple, dict, torch.dtype, "LossMode"], "torch.Tensor | None"]

SAFE_DOMAIN: dict[str, LossFn] = {}

# How far inside the domain a repaired value should land; a value exactly on the boundary is
# one rounding error away from failing again.
MARGIN = 0.05
# |divisor| below this counts as "near zero".
DIVISOR_EPS = 0.05

# Operators whose true gradient is zero on large regions; value search replaces their gradient
# by the identity (straight-through estimator) when computing a repair step.
STRAIGHT_THROUGH = frozenset(
    {
        "floor", "ceil", "round", "trunc", "fix", "sign", "sgn", "relu", "relu6", "hardtanh",
        "clamp", "clamp_min", "clamp_max", "threshold", "hardsigmoid", "hardswish", "heaviside",
        "nan_to_num", "floor_divide", "softshrink", "hardshrink", "rrelu",
        "nextafter",  # x one ulp towards y: autograd gives it no slope at all
        # No gradient by construction; a search through them still has to reach what they read.
        "detach", "detach_copy",
    }
)
# Of those, the clamps: flat only outside a range, which a value leaves one way alone.
CLAMPS = frozenset({"relu", "relu6", "hardtanh", "clamp", "clamp_min", "clamp_max"})
# Of those, the ones autograd has no derivative for at all (backward raises): their own result
# is detached before the straight-through identity is added.
NO_DERIVATIVE = frozenset({"heaviside", "floor_divide", "rfloor_divide"})


def _divide_proxy(x: Any, y: Any, out: torch.Tensor) -> torch.Tensor | None:
    """x / y with the divisor held, for the gradient of x // y: straight through the rounding to
    the dividend, with the divisor's sign and scale (`v // -1.0` grows as v falls; the identity
    would push the wrong way). The divisor gets none: its own slope, -x / y ** 2, points at
    the pole, and a quotient that must grow would drive it across zero. Unless no gradient
    reaches the dividend (`1.0 // w`): then the divisor's slope is the only way to move the
    quotient (erfinv(1.0 // w) needs w > 1), and a step across the pole is taken back."""
    if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.requires_grad):
        return _divisor_proxy(x, y)
    y = y.detach() if isinstance(y, torch.Tensor) else y
    if isinstance(y, bool) or not isinstance(y, (torch.Tensor, int, float)):
        return None
    if isinstance(y, torch.Tensor):
        y = torch.where(y == 0, 1.0, y.to(x.dtype))
    elif y == 0:
        return None
    try:
        proxy = x / y
    except (RuntimeError, TypeError):
        return None
    return proxy if isinstance(proxy, torch.Tensor) and proxy.is_floating_point() else None


def _divisor_proxy(x: Any, y: Any) -> torch.Tensor | None:
    """x / y with the dividend held, where only the divisor carries a gradient."""
    if not (isinstance(y, torch.Tensor) and y.is_floating_point() and y.requires_grad):
        return None
    x = x.detach() if isinstance(x, torch.Tensor) else x
    if isinstance(x, bool) or not isinstance(x, (torch.Tensor, int, float)):
        return None
    y_d = y.detach()
    try:
        # Where y is exactly 0 its slope is infinite: read it at y = 1 instead.
        proxy = x / torch.where(y_d == 0, torch.ones_like(y), y)
    except (RuntimeError, TypeError):
        return None
    return proxy if isinstance(proxy, torch.Tensor) and proxy.is_floating_point() else None


def _remainder_proxy(x: Any, y: Any, out: torch.Tensor) -> torch.Tensor | None:
    """fmod/remainder for the gradient: moves with x as the op does, and with the divisor as if
    both scaled together (x % y is y * frac(x / y): the result is bounded by |y|, so a result that
    must grow needs a larger divisor; the true derivative, -trunc(x / y), points the other way
    whenever x / y >= 1)."""
    parts = []
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.requires_grad:
        parts.append(x - x.detach())
    if isinstance(y, torch.Tensor) and y.is_floating_point() and y.requires_grad:
        y_d = y.detach()
        ratio = torch.where(y_d == 0, 0.0, out.detach() / torch.where(y_d == 0, 1.0, y_d))
        parts.append(ratio * (y - y_d))
    return out.detach() + sum(parts) if parts else None


def _atan2_proxy(y: Any, x: Any, out: torch.Tensor) -> torch.Tensor | None:
    """atan2's slope with exact zeros of y read as 1. atan2(0, x) is 0 or pi by the sign of x,
    but its slope in x, -y / (x^2 + y^2), is 0 there: a log or sqrt downstream that needs pi
    could never pull x negative (y = erfinv(heaviside(v, w)) is often exactly 0). atan2(1, x)
    falls with x as the step from pi to 0 does, with a slope Adam can use (a tiny y's slope
    would vanish in its float32 second moment). Only the gradient changes, never the value."""
    if not (isinstance(y, torch.Tensor) and isinstance(x, torch.Tensor) and y.is_floating_point()):
        return None
    zero = y.detach() == 0
    if not (x.requires_grad and bool(zero.any())):
        return None
    return torch.atan2(torch.where(zero, torch.ones_like(y), y), x)


class PoleCrossing:
    """Whether operators with a pole inside their operand's range (tan, reciprocal, a divisor)
    pass back their slope reversed. Their slope leads a value that must change sign away from
    the pole, the short way there: log(tan(v)) with v just above tan's pole at -pi/2 (tan very
    negative) is sent up, into the clamp at -1 of a hardtanh feeding v, where tan stays
    negative; across the pole, just below -pi/2, tan is large and positive. Value search turns
    this on when a descent through such an operator finds no gradient or stalls, and off when
    it resamples. `seen` says whether one was met (with an operand that carries a gradient)
    since the last `clear`."""

    def __init__(self) -> None:
        self.across = False
        self.seen = False

    def clear(self) -> None:
        self.seen = False

    def reset(self) -> None:
        self.across, self.seen = False, False



def _reversed_slope(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """A stand-in whose gradient in x is minus fn's (the value is never used)."""
    return -fn(x)


def _pole_proxy(x: Any, fn: Callable[[torch.Tensor], torch.Tensor], poles: PoleCrossing) -> torch.Tensor | None:
    """For an operator with a pole in operand x: its slope reversed while `poles.across`."""
    if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.requires_grad):
        return None
    poles.seen = True
    return _reversed_slope(x, fn) if poles.across else None


def _divisor_pole_proxy(x: Any, y: Any, poles: PoleCrossing) -> torch.Tensor | None:
    """x / y with the slope in the divisor y reversed while `poles.across` (the dividend's kept)."""
    if not (isinstance(y, torch.Tensor) and y.is_floating_point() and y.requires_grad):
        return None
    poles.seen = True
    if not poles.across or isinstance(x, bool) or not isinstance(x, (torch.Tensor, int, float)):
        return None
    x_d = x.detach() if isinstance(x, torch.Tensor) else x
    try:
        return x / y.detach() - x_d / y
    except (RuntimeError, TypeError):
        return None


def _kink_proxy(x: Any, slope: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor | None:
    """For |x| and x ** 2, whose slope is 0 at exactly x = 0: there, a slope of 1 instead. A
    divisor |expm1(floor(v))| is exactly 0 for a whole range of v, and a zero slope there would
    leave it for resampling to find; either direction away from 0 helps."""
    if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.requires_grad):
        return None
    xd = x.detach()
    zero = xd == 0
    if not bool(zero.any()):
        return None
    return x * torch.where(zero, torch.ones_like(xd), slope(xd))


def _operands(args: tuple, kwargs: dict, first: str, second: str) -> tuple[Any, Any]:
    return _arg(args, kwargs, 0, first, "input", "self"), _arg(args, kwargs, 1, second, "other")


# Zero-gradient (or misleading-gradient) operators whose result, during a repair step, carries
# the gradient of a smooth stand-in instead: fn(args, kwargs, out, mode) -> proxy (None: no stand-in).
PROXY_GRADIENT: dict[str, Callable[[tuple, dict, torch.Tensor, "LossMode"], "torch.Tensor | None"]] = {
    "floor_divide": lambda a, k, out, mode: _divide_proxy(*_operands(a, k, "input", "other"), out),
    "rfloor_divide": lambda a, k, out, mode: _divide_proxy(_arg(a, k, 1, "other"), _arg(a, k, 0, "self"), out),
    "fmod": lambda a, k, out, mode: _remainder_proxy(*_operands(a, k, "input", "other"), out),
    "remainder": lambda a, k, out, mode: _remainder_proxy(*_operands(a, k, "input", "other"), out),
    "rremainder": lambda a, k, out, mode: _remainder_proxy(_arg(a, k, 1, "other"), _arg(a, k, 0, "self"), out),
    "atan2": lambda a, k, out, mode: _atan2_proxy(*_operands(a, k, "input", "other"), out),
    "tan": lambda a, k, out, mode: _pole_proxy(_arg(a, k, 0, "input", "self"), torch.tan, mode.poles),
    "reciprocal": lambda a, k, out, mode: _pole_proxy(_arg(a, k, 0, "input", "self"), torch.reciprocal, mode.poles),
    "div": lambda a, k, out, mode: _divisor_pole_proxy(*_operands(a, k, "input", "other"), mode.poles),
    "abs": lambda a, k, out, mode: _kink_proxy(_arg(a, k, 0, "input", "self"), torch.sign),
    "square": lambda a, k, out, mode: _kink_proxy(_arg(a, k, 0, "input", "self"), lambda x: 2 * x),
    "rdiv": lambda a, k, out, mode: _divisor_pole_proxy(_arg(a, k, 1, "other"), _arg(a, k, 0, "self"), mode.poles),
}
# Monotone increasing operators whose true gradient vanishes on large regions: saturation
# (tanh(20), sigmoid(-100), elu(-100)), or rounding in low precision (tanhshrink(0.02) is 0 in
# bfloat16, and so is its gradient). Value search adds a small identity gradient to theirs, so
# that a culprit downstream can still pull their operand the right way.
MONOTONE_FLAT = frozenset(
    {"tanhshrink", "tanh", "sigmoid", "erf", "softsign", "elu", "celu", "selu", "logsigmoid", "softplus",
     "atan", "hardtanh", "hardsigmoid", "relu6",
     "logit"}  # with eps, flat outside [eps, 1 - eps], where it clamps its operand
)
# The size of that identity gradient (relative to the operator's own, which is at most ~1).
GRADIENT_FLOOR = 1e-2
# Float -> integer casts: the integer result gets the float input as its shadow.
INT_CASTS = frozenset({"to", "type", "long", "int", "short", "char", "byte"})
# Comparisons: the boolean result gets a signed float shadow (positive where true).
COMPARISONS = {"gt": 1.0, "ge": 1.0, "greater": 1.0, "greater_equal": 1.0,
               "lt": -1.0, "le": -1.0, "less": -1.0, "less_equal": -1.0,
               "signbit": -1.0}  # x < 0, against an implicit 0

_ALIASES = {
    "truediv": "div", "divide": "div", "true_divide": "div", "idiv": "div", "itruediv": "div",
    "rtruediv": "rdiv",
    "floordiv": "floor_divide", "ifloordiv": "floor_divide", "rfloordiv": "rfloor_divide",
    "mod": "remainder", "imod": "remainder", "rmod": "rremainder",
    "ipow": "pow", "float_power": "pow",
    "iadd": "add", "isub": "sub", "imul": "mul", "multiply": "mul", "subtract": "sub",
    "imatmul": "matmul",
    "arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh",
    "arccosh": "acosh", "arctanh": "atanh",
    "clip": "clamp", "clip_min": "clamp_min", "clip_max": "clamp_max",
    "expit": "sigmoid", "negative": "neg",
    "gammaln": "lgamma", "psi": "digamma", "multigammaln": "mvlgamma",
    "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
}
_INPLACE_DUNDERS = frozenset(
    {"__iadd__", "__isub__", "__imul__", "__idiv__", "__itruediv__", "__ifloordiv__",
     "__imod__", "__ipow__", "__imatmul__", "__iand__", "__ior__", "__ixor__",
     "__ilshift__", "__irshift__", "__setitem__"}
)


@dataclass(frozen=True)
class OpInfo:
    """What value search needs to know about one intercepted callable."""

    name: str  # canonical name, e.g. "log", "div", "rdiv"
    inplace: bool  # mutates its first argument (x.log_(), x += y, x[i] = v)


_INFO_CACHE: dict[Any, OpInfo] = {}


def op_info(func: Any) -> OpInfo:
    """Canonical name and in-place flag of a callable seen by a TorchFunctionMode (cached)."""
    try:
        return _INFO_CACHE[func]
    except (KeyError, TypeError):
        pass
    raw = getattr(func, "__name__", None) or str(func)
    inplace = raw in _INPLACE_DUNDERS or (raw.endswith("_") and not raw.startswith("__"))
    name = raw
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
    elif inplace:
        name = name[:-1]
    if name.startswith("_") and not name.startswith("__"):
        name = name[1:]  # F.threshold is `_threshold`, private wrappers of public ops alike
    name = name.removeprefix("special_")
    name = _ALIASES.get(name, name)
    info = OpInfo(name=name, inplace=inplace)
    if len(_INFO_CACHE) > 4096:  # bound methods of properties are fresh objects each access
        _INFO_CACHE.clear()
    try:
        _INFO_CACHE[func] = info
    except TypeError:
        pass
    return info


def canonical_name(func: Any) -> str:
    return op_info(func).name


def safe_domain(*names: str) -> Callable[[LossFn], LossFn]:
    """Register a loss for the named operators."""

    def register(fn: LossFn) -> LossFn:
        for n in names:
            if n in SAFE_DOMAIN:
                raise ValueError(f"safe-domain loss for {n!r} registered twice")
            SAFE_DOMAIN[n] = fn
        return fn

    return register


# --------------------------------------------------------------------------- helpers


def _float(x: Any) -> torch.Tensor | None:
    """x as a float32/64 tensor (low precision widened), or None if x is not a float tensor."""
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x if x.dtype in (torch.float32, torch.float64) else x.float()
    return None


def _arg(args: tuple, kwargs: dict, i: int, *names: str) -> Any:
    if len(args) > i:
        return args[i]
    for n in names:
        if n in kwargs:
            return kwargs[n]
    return None


def _below(x: torch.Tensor, lo: float) -> torch.Tensor:
    """Penalty for elements below lo."""
    return torch.relu(lo - x).sum()


def _above(x: torch.Tensor, hi: float) -> torch.Tensor:
    return torch.relu(x - hi).sum()


class TieBreak:
    """Which way a value exactly *on* a forbidden point (a divisor of exactly 0, lgamma at a
    pole) is pushed: either way leaves it, and nothing in the value tells which one can be
    reached. Upwards by default (relu(x) is exactly 0 on its flat side, and rises with x);
    value search turns it downwards when a descent stalls at such ties (a hardtanh saturated
    at its maximum -1 feeds lgamma a 0 after softshrink: only a smaller value moves it).
    `seen` says whether the losses built since the last `clear` met an exact tie."""

    def __init__(self) -> None:
        self.direction = 1.0
        self.seen = False

    def clear(self) -> None:
        self.seen = False

    def reset(self) -> None:
        self.direction, self.seen = 1.0, False

    def signs(self, offset: torch.Tensor) -> torch.Tensor:
        """+1 / -1 per element by the sign of `offset` (the value minus the forbidden point),
        ties by `direction`."""
        d = offset.detach()
        tie = d == 0
        if bool(tie.any()):
            self.seen = True
        return torch.where(d > 0, 1.0, torch.where(tie, self.direction, -1.0)).to(offset.dtype)



@dataclass
class LossMode:
    """The switches a value search flips while it runs and its losses read: which way values
    exactly on a forbidden point are pushed, and whether slopes through poles are reversed. Each
    search has its own, passed to every loss and stand-in: no module state changes."""

    ties: TieBreak = field(default_factory=TieBreak)
    poles: PoleCrossing = field(default_factory=PoleCrossing)

    def clear(self) -> None:
        """Forget what the last run met (before each run)."""
        self.ties.clear()
        self.poles.clear()

    def reset(self) -> None:
        """Back to the start: ties pushed up, poles not crossed (a fresh draw)."""
        self.ties.reset()
        self.poles.reset()


def _away_from_zero(x: torch.Tensor, eps: float, ties: TieBreak) -> torch.Tensor:
    """Penalty for |x| < eps whose gradient is non-zero even at exactly 0 (pushed the ties' way)."""
    return torch.relu(eps - x * ties.signs(x)).sum()


def exp_bound(dtype: torch.dtype) -> float:
    """Largest argument of exp that is safely finite in `dtype` (with room to spare)."""
    if not dtype.is_floating_point:
        dtype = torch.float32
    return 0.9 * math.log(torch.finfo(dtype).max)


def sum_of(parts: list) -> torch.Tensor | None:
    """The sum of the tensors in `parts` in their order (None entries skipped; None if none is left)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def magnitude_loss(args: tuple, kwargs: dict, dtype: torch.dtype) -> torch.Tensor | None:
    """Generic fallback: shrink every float input towards zero (overflow is the usual cause)."""
    parts = []
    for a in _tensors(args, kwargs):
        f = _float(a)
        if f is not None and f.requires_grad and f.numel():
            parts.append(f.square().mean())
    return sum_of(parts)


def _tensors(args: tuple, kwargs: dict):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, torch.Tensor):
                    yield b


# --------------------------------------------------------------------------- the table


def _of_operand(penalty: Callable[[torch.Tensor, "LossMode"], torch.Tensor]) -> LossFn:
    """A loss on the one float operand of a unary operator."""

    def loss(args, kwargs, dtype, mode):
        x = _float(_arg(args, kwargs, 0, "input", "self"))
        return None if x is None else penalty(x, mode)

    return loss


def _from_numerics(register: Callable[..., Callable[[LossFn], LossFn]], names: tuple[str, ...]
                   ) -> Callable[[Callable[[Interval], LossFn]], Callable[[Interval], LossFn]]:
    """For each unary operator named, register (with `register`: `safe_domain` or
    `derivative_pole`) the loss that the decorated `make(domain)` builds from the operator's
    domain as the generator's numerics state it (numerics.py, the one home of where an operator
    is finite): the loss's shape is this module's, its bounds are the record's."""

    def decorate(make: Callable[[Interval], LossFn]) -> Callable[[Interval], LossFn]:
        for n in names:
            register(n)(make(numerics(n).domain))
        return make

    return decorate


def _domain_losses(*names: str) -> Callable[[Callable[[Interval], LossFn]], Callable[[Interval], LossFn]]:
    return _from_numerics(safe_domain, names)


@_domain_losses("log", "log2", "log10", "rsqrt", "sqrt", "log1p")
def _above_lower_bound(dom: Interval) -> LossFn:
    """Every element a margin above the lower bound: log's open 0, log1p's -1, and sqrt's
    closed 0 too (its slope is infinite there, so the margin serves its backward as well)."""
    return _of_operand(lambda x, mode: _below(x, dom.lo + MARGIN))


def _away_from_poles(x: torch.Tensor, ties: TieBreak) -> torch.Tensor:
    """Gamma-family poles: 0, -1, -2, ... Negative non-integers are fine (lgamma(-1.5) is
    finite), so only values near a non-positive integer are penalised, pushed off it (one
    exactly on it: the ties' way)."""
    d = x - torch.round(x.detach())
    near_pole = x.detach() < MARGIN
    direction = ties.signs(torch.where(near_pole, d, torch.ones_like(d)))
    return torch.where(near_pole, torch.relu(MARGIN - d * direction), torch.zeros_like(x)).sum()


for _n in ops_where(poles="gamma"):  # lgamma, digamma: poles at 0, -1, -2, ...
    safe_domain(_n)(_of_operand(lambda x, mode: _away_from_poles(x, mode.ties)))


@safe_domain("polygamma")
def _polygamma(args, kwargs, dtype, mode):
    # torch.polygamma(n, x) and x.polygamma(n) put x in different places.
    x = next((f for f in map(_float, _tensors(args, kwargs)) if f is not None), None)
    return None if x is None else _away_from_poles(x, mode.ties)


@safe_domain("mvlgamma")
def _mvlgamma(args, kwargs, dtype, mode):
    # mvlgamma(x, p) is finite for x > (p - 1) / 2.
    x = _float(_arg(args, kwargs, 0, "input", "self"))
    p = _arg(args, kwargs, 1, "p")
    if x is None:
        return None
    return _below(x, (p - 1) / 2 + MARGIN if isinstance(p, int) else MARGIN)


def _outside_closed(x: torch.Tensor, bound: float, above: bool) -> torch.Tensor:
    """Penalty for elements outside a closed bound (below it, or above it if `above`), growing
    from the bound plus the margin; elements already inside are left alone, even within the
    margin. Where the operand cannot pass the bound (sin is at most 1 for acosh, a softmax at
    most 1 for asin), a margin beyond it is out of reach: the elements that hit the bound
    exactly (bfloat16 rounds sin near its peak to 1) must settle there, not be pushed on and
    jitter back out, which Adam's normalised steps do however small the slope gets."""
    outside = x.detach() > bound if above else x.detach() < bound
    gap = (x - (bound - MARGIN)) if above else ((bound + MARGIN) - x)
    return torch.where(outside, gap, torch.zeros_like(gap)).sum()


@_domain_losses("atanh", "erfinv")
def _inside_symmetric_open(dom: Interval) -> LossFn:
    """|x| a margin inside the open (-hi, hi)."""
    return _of_operand(lambda x, mode: _above(x.abs(), dom.hi - MARGIN))


@_domain_losses("asin", "acos")
def _inside_symmetric_closed(dom: Interval) -> LossFn:
    """|x| within the closed [-hi, hi]."""
    return _of_operand(lambda x, mode: _outside_closed(x.abs(), dom.hi, above=True))


@_domain_losses("acosh")
def _at_least_closed(dom: Interval) -> LossFn:
    """x within the closed [lo, inf)."""
    return _of_operand(lambda x, mode: _outside_closed(x, dom.lo, above=False))


@safe_domain("entr")
def _entr(args, kwargs, dtype, mode):
    x = _float(_arg(args, kwargs, 0, "input", "self"))
    return None if x is None else _below(x, 0.0)


@safe_domain("xlog1py")
def _xlog1py(args, kwargs, dtype, mode):
    y = _float(_arg(args, kwargs, 1, "other"))
    return None if y is None else _below(y, -1.0 + MARGIN)


@_domain_losses("logit", "ndtri")
def _inside_open(dom: Interval) -> LossFn:
    """x a margin inside the open (lo, hi)."""
    return _of_operand(lambda x, mode: _below(x, dom.lo + MARGIN) + _above(x, dom.hi - MARGIN))


@safe_domain("exp", "expm1")
def _exp(args, kwargs, dtype, mode):
    x = _float(_arg(args, kwargs, 0, "input", "self"))
    return None if x is None else _above(x, exp_bound(dtype))


@safe_domain("exp2")
def _exp2(args, kwargs, dtype, mode):
    x = _float(_arg(args, kwargs, 0, "input", "self"))
    return None if x is None else _above(x, exp_bound(dtype) / math.log(2.0))


@safe_domain("sinh", "cosh")
def _hyperbolic(args, kwargs, dtype, mode):
    x = _float(_arg(args, kwargs, 0, "input", "self"))
    return None if x is None else _above(x.abs(), exp_bound(dtype))


@safe_domain("tan")
def _tan(args, kwargs, dtype, mode):
    x = _float(_arg(args, kwargs, 0, "input", "self"))
    return None if x is None else _away_from_zero(torch.cos(x), DIVISOR_EPS, mode.ties)


for _n in ops_where(poles="zero"):  # reciprocal
    safe_domain(_n)(_of_operand(lambda x, mode: _away_from_zero(x, DIVISOR_EPS, mode.ties)))


@safe_domain("div", "floor_divide", "remainder", "fmod")
def _divisor_second(args, kwargs, dtype, mode):
    y = _float(_arg(args, kwargs, 1, "other"))
    return None if y is None else _away_from_zero(y, DIVISOR_EPS, mode.ties)


@safe_domain("rdiv", "rfloor_divide", "rremainder")
def _divisor_first(args, kwargs, dtype, mode):
    # a.__rtruediv__(b) computes b / a: the tensor the method is called on is the divisor.
    y = _float(_arg(args, kwargs, 0, "self", "input"))
    return None if y is None else _away_from_zero(y, DIVISOR_EPS, mode.ties)


@safe_domain("addcdiv")
def _addcdiv_divisor(args, kwargs, dtype, mode):
    # x + value * t1 / t2: a zero t2 gives inf, or NaN (0 * inf) even where value is 0.
    y = _float(_arg(args, kwargs, 2, "tensor2"))
    return None if y is None else _away_from_zero(y, DIVISOR_EPS, mode.ties)


@safe_domain("xlogy")
def _xlogy(args, kwargs, dtype, mode):
    y = _float(_arg(args, kwargs, 1, "other"))
    return None if y is None else _below(y, MARGIN)


def _pow_loss(base: Any, exponent: Any, dtype: torch.dtype) -> torch.Tensor | None:
    b, e = _float(base), _float(exponent)
    parts = []
    integral_exponent = isinstance(exponent, int) or (
        isinstance(exponent, float) and float(exponent).is_integer()
    )
    if b is not None and not integral_exponent:
        parts.append(_below(b, MARGIN))  # negative base with fractional exponent -> NaN
    # |exponent * log|base|| bounded keeps the result away from overflow and from 0 ** negative.
    log_b = torch.log(b.abs() + 1e-6) if b is not None else (
        math.log(abs(base) + 1e-6) if isinstance(base, (int, float)) else None
    )
    exp_v = e if e is not None else (exponent if isinstance(exponent, (int, float)) else None)
    if log_b is not None and exp_v is not None and (b is not None or e is not None):
        parts.append(_above((exp_v * log_b).abs(), exp_bound(dtype)))
    return sum_of(parts)


@safe_domain("pow")
def _pow(args, kwargs, dtype, mode):
    return _pow_loss(_arg(args, kwargs, 0, "input", "self"), _arg(args, kwargs, 1, "exponent", "other"), dtype)


@safe_domain("rpow")
def _rpow(args, kwargs, dtype, mode):
    # a.__rpow__(b) computes b ** a.
    return _pow_loss(_arg(args, kwargs, 1, "other"), _arg(args, kwargs, 0, "self"), dtype)


@safe_domain("lp_pool1d", "lp_pool2d", "lp_pool3d")
def _lp_pool(args, kwargs, dtype, mode):
    # (sum x ** p) ** (1 / p): a fractional p makes negative inputs NaN, an odd p negative sums.
    x = _float(_arg(args, kwargs, 0, "input"))
    p = _arg(args, kwargs, 1, "norm_type")
    if x is None:
        return None
    if isinstance(p, (int, float)) and float(p).is_integer() and int(p) % 2 == 0:
        return magnitude_loss((x,), {}, dtype)
    # A fractional or odd p: a window whose sum of x ** p is negative has a NaN p-th root.
    return _below(x, MARGIN)


@safe_domain("batch_norm", "instance_norm")
def _running_variance(args, kwargs, dtype, mode):
    # eval-mode normalisation divides by sqrt(running_var + eps).
    var = _float(_arg(args, kwargs, 2, "running_var"))
    return None if var is None else _below(var, MARGIN)


def repair_loss(name: str, args: tuple, kwargs: dict, dtype: torch.dtype, mode: LossMode) -> tuple[torch.Tensor | None, str]:
    """The repair loss for operator `name` on these inputs, and which kind it is: "domain" (the
    table's loss: some input lies outside the safe domain), "magnitude" (the generic loss: the
    inputs are inside the domain, or the table has no entry, so the result overflowed) or
    "none" (outside the domain along an input with no gradient: only resampling can help)."""
    return _table_loss(SAFE_DOMAIN, name, args, kwargs, dtype, mode)


def _table_loss(table: dict[str, LossFn], name: str, args: tuple, kwargs: dict,
                dtype: torch.dtype, mode: LossMode) -> tuple[torch.Tensor | None, str]:
    """`table`'s loss for `name` when it is positive ("domain"), else the magnitude loss."""
    fn = table.get(name)
    if fn is not None:
        try:
            loss = fn(args, kwargs, dtype, mode)
        except (RuntimeError, TypeError, ValueError, IndexError):
            loss = None
        if loss is not None and float(loss.detach()) > 0.0:
            # Outside the domain: repair by gradient if that input is differentiable at all;
            # if not (an integer-driven divisor, say), no magnitude loss will help: resample.
            return (loss, "domain") if loss.requires_grad else (None, "none")
    loss = magnitude_loss(args, kwargs, dtype)
    return loss, ("magnitude" if loss is not None else "none")


def hinge_for(name: str, args: tuple, kwargs: dict, dtype: torch.dtype, mode: LossMode) -> torch.Tensor | None:
    """The table's loss alone (no fallback): keeps an already repaired operator repaired."""
    fn = SAFE_DOMAIN.get(name)
    if fn is None:
        return None
    try:
        loss = fn(args, kwargs, dtype, mode)
    except (RuntimeError, TypeError, ValueError, IndexError):
        return None
    return loss if loss is not None and loss.requires_grad else None


# -- derivative poles: finite values whose gradient is not ----------------------------------------
# A test that runs a backward is judged only where its gradients are finite too. Some operators
# are finite on a closed domain whose edge is a pole of their derivative (sqrt at 0, asin at
# ±1), or have a derivative that overflows long before their value does (1 / x is 1e20 where
# its slope is 1e40). Value search (in backward mode) finds the operator whose backward turned
# finite gradients into non-finite ones and descends the loss this table gives for its inputs:
# zero once every element is a margin away from the pole.
DERIVATIVE_POLES: dict[str, LossFn] = {}


def derivative_pole(*names: str) -> Callable[[LossFn], LossFn]:
    def register(fn: LossFn) -> LossFn:
        for n in names:
            DERIVATIVE_POLES[n] = fn
        return fn

    return register


# Where the forward's own domain loss already keeps a margin from the pole, it is the loss.
for _n in ("sqrt", "rsqrt", "log", "log2", "log10", "log1p", "atanh", "reciprocal"):
    derivative_pole(_n)(SAFE_DOMAIN[_n])
derivative_pole("div", "remainder", "fmod")(_divisor_second)
derivative_pole("rdiv")(_divisor_first)


# asin, acos: finite on [-1, 1], their slope infinite at both ends (the forward's loss lets
# +-1 stand); acosh: its slope infinite at 1.
_from_numerics(derivative_pole, ("asin", "acos"))(_inside_symmetric_open)


@_from_numerics(derivative_pole, ("acosh",))
def _above_closed_bound(dom: Interval) -> LossFn:
    """x a margin above the closed lower bound, where the slope is infinite."""
    return _of_operand(lambda x, mode: _below(x, dom.lo + MARGIN))


@derivative_pole("xlogy")
def _xlogy_slope(args, kwargs, dtype, mode):
    # x * log(y): its slope in y, x / y, is infinite at y = 0 where the value is 0
    y = _float(_arg(args, kwargs, 1, "other"))
    return None if y is None else _away_from_zero(y, DIVISOR_EPS, mode.ties)


def _pow_slope(base: Any, exponent: Any, ties: TieBreak) -> torch.Tensor | None:
    """b ** e: slope e * b ** (e - 1) has a pole at b = 0 for e < 1, and the slope in a tensor
    exponent, b ** e * log(b), is NaN at b = 0 whatever e is."""
    b = _float(base)
    if b is None:
        return None
    if isinstance(exponent, torch.Tensor) and exponent.requires_grad:
        return _away_from_zero(b, MARGIN, ties)
    e = float(exponent) if isinstance(exponent, (int, float)) and not isinstance(exponent, bool) else None
    if e is None or e >= 1.0 or (e.is_integer() and e >= 0):
        return None
    return _away_from_zero(b, MARGIN, ties)


@derivative_pole("pow")
def _pow_pole(args, kwargs, dtype, mode):
    return _pow_slope(_arg(args, kwargs, 0, "input", "self"), _arg(args, kwargs, 1, "exponent", "other"), mode.ties)


@derivative_pole("rpow")
def _rpow_pole(args, kwargs, dtype, mode):
    return _pow_slope(_arg(args, kwargs, 1, "other"), _arg(args, kwargs, 0, "self"), mode.ties)


def derivative_pole_loss(name: str, args: tuple, kwargs: dict, dtype: torch.dtype, mode: LossMode) -> tuple[torch.Tensor | None, str]:
    """The loss that moves operator `name`'s inputs off the poles of its derivative, and its
    kind as `repair_loss` names them: "domain" (the table's, positive), "magnitude" (no entry,
    or none of its elements near a pole: an overflowing slope, which shrinking cures), "none"."""
    return _table_loss(DERIVATIVE_POLES, name, args, kwargs, dtype, mode)

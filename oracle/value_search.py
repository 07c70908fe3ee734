"""Value search: inputs and weights for which no operator of a program yields NaN or Inf.

A test whose reference run produces NaN or Inf somewhere says little about the compiler under
test: NaN comparisons are vacuous, and a NaN that never reaches the output (argmax of a NaN
tensor, `where(mask, log(x), 0)`) still lets eager and compiled code disagree legitimately.
So before a test runs, we look for values that keep every intermediate finite.

The search works on any program, not only generated ones: every operator call is intercepted at
run time by a `TorchFunctionMode`. That level sees `torch.*` functions, `torch.nn.functional`
calls, tensor methods, operators (`a / b`), in-place calls and `x[i] = v`, each as one
user-visible operator, and it sits above autograd, so losses computed on an operator's inputs
can be differentiated back to the model's inputs and weights. (A `TorchDispatchMode` would see
the ATen decompositions instead: internal `-inf` fills of attention masks and the like, and
tensors with no autograd history.)

One iteration:
1. run the model under the interceptor; the first operator whose output is not finite is the
   culprit (its inputs were finite, or an earlier operator would have been the culprit);
2. take an Adam step on the culprit's safe-domain loss (oracle/safe_domain.py), plus the losses
   of operators that were culprits before (so that repairing one does not break another);
   operators with zero gradient (floor, relu's flat side, clamp, casts, comparisons) pass the
   gradient straight through during this run (a clamp only where it would move its operand
   back into range; values exactly on a pole or zero divisor are pushed up, and down when no
   gradient leaves them upwards; operators with a pole, tan and divisors, reverse their slope
   when a descent through them gets stuck, to cross the pole, see safe_domain.PoleCrossing);
3. when there is no usable gradient, the loss stops falling, or `max_descent` steps from one
   start have not succeeded (two culprits that undo each other's repairs), resample instead;
   a step after which an operator *before* the culprit fails (it overshot into another
   operator's forbidden region) is taken back and retried with integer inputs held (if one of
   them moved), else at half the length; steps double while the loss falls steadily but
   slowly, or stays exactly level on the plateau of a step function (the domain is far away:
   y must reach 57 for int8(y / 57) >= 1, x must fall to -100 for -x // 100 >= 1), and a lengthened
   step after which the loss rises (it overshot a narrow domain) is taken back and shortened.

Low-precision tensors are optimised through a float32 master copy; shapes, dtypes and strides
of the inputs never change. Integer inputs (generated programs feed them straight into log,
acos, division) are optimised too: a float master, rounded into the values' original range
(widened when they are all equal, as a lone scalar's are, and further for gradient steps than
for draws, see `_int_reach`; a narrow result that wraps is judged on the unwrapped side, see
`_valued`), is what Adam moves; the operators
see a float "shadow" equal to the integers, with the master's gradient (every integer result
downstream gets one too, equal to its own values: `x ^ x` reads 0, not x). Shadows pass through
integer-only operators too (bitwise ops and shifts move with their operand, `~x` as `-x - 1`),
through zero-gradient ones (sign, clamp) straight through, and through operators with several
results (cummax, sort). Integer inputs are resampled from sub-ranges that domains favour
(positives, {-1, 0, 1}, ones, zeros); boolean inputs are only resampled (at random, all set,
none set). Since one joint draw rarely suits several such inputs at once, a resampling is
followed by a sweep: one discrete input at a time, each sub-range is tried and the draw that
gets furthest through the program (then leaves fewest non-finite elements) is kept.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map_only, tree_unflatten

from nnforge.core.backward import call_gradients
from nnforge.core.dtypes import INT_SEARCH_WIDEN, from_torch, int_search_range
from nnforge.core.limits import VALUE_SEARCH_BUDGET_MS
from nnforge.oracle.safe_domain import (
    CLAMPS, COMPARISONS, GRADIENT_FLOOR, INT_CASTS, MONOTONE_FLAT, NO_DERIVATIVE, PROXY_GRADIENT, STRAIGHT_THROUGH, TIES, POLES,
    derivative_pole_loss, hinge_for, op_info, repair_loss,
)

# Integer-only operators: the float proxy through which a gradient reaches their operand (the
# first one with a shadow). Roughly monotone stand-ins; exactness does not matter, direction does.
INTEGER_PROXY = {
    "bitwise_or": lambda s: s, "or": lambda s: s, "ror": lambda s: s, "ior": lambda s: s,
    "bitwise_and": lambda s: s, "and": lambda s: s, "rand": lambda s: s, "iand": lambda s: s,
    "bitwise_xor": lambda s: s, "xor": lambda s: s, "rxor": lambda s: s, "ixor": lambda s: s,
    "bitwise_left_shift": lambda s: s, "lshift": lambda s: s, "bitwise_right_shift": lambda s: s,
    "rshift": lambda s: s, "gcd": lambda s: s.abs(), "lcm": lambda s: s.abs(),
    "bitwise_not": lambda s: -s - 1.0, "invert": lambda s: -s - 1.0,
}

__all__ = ["SearchResult", "ValueSearch", "first_nonfinite", "checked_call", "diagnose", "FAILURE_CLASSES"]

# Ranges tried, in order, when values are resampled instead of descended.
SAMPLING_RANGES: tuple[tuple[float, float], ...] = (
    (-1.0, 1.0),
    (0.5, 2.0),
    (-0.2, 0.2),
    (0.1, 1.0),
    (-3.0, 3.0),
    (-0.02, 0.02),  # deep chains of products overflow (or leave acos's domain) unless tiny
)
# Sub-ranges tried, in order, when an integer input is resampled (see `_int_range`).
INT_SUBRANGES: tuple[tuple[int | None, int | None], ...] = (
    (None, None), (1, None), (-1, 1), (1, 1), (0, 0), (1, 3), (None, -1), (0, 1), (-1, -1), (2, 4),
)
# Shares of True a boolean input is resampled with.
BOOL_DENSITIES = (0.5, 1.0, 0.0, 0.9, 0.1)


@dataclass(frozen=True)
class SearchResult:
    """Outcome of one value search.

    `inputs` and `state_dict` hold the values found (on failure: the values the search started
    from). `culprit` names the operator that was last seen producing NaN/Inf ("output" when only
    the returned value was non-finite, "exception: ..." when the program raised)."""

    success: bool
    inputs: tuple
    state_dict: dict
    iterations: int
    elapsed_ms: float
    culprit: str | None
    initially_finite: bool
    method: str  # "none" | "gradient" | "sampling"
    # On failure, why the last culprit resisted (one of FAILURE_CLASSES); None on success.
    failure: str | None = None
    # False when the values had to leave their bins (the plan's) to become finite
    bins_kept: bool = True

    def to_json(self) -> dict:
        """The scalar fields (the tensors are saved separately, as inputs.pt/state_dict.pt)."""
        return {
            "success": self.success,
            "iterations": self.iterations,
            "elapsed_ms": self.elapsed_ms,
            "culprit": self.culprit,
            "initially_finite": self.initially_finite,
            "method": self.method,
            "failure": self.failure,
            "bins_kept": self.bins_kept,
        }

    @classmethod
    def from_json(cls, data: dict, inputs: tuple = (), state_dict: dict | None = None) -> "SearchResult":
        return cls(inputs=tuple(inputs), state_dict=dict(state_dict or {}), **data)


# --------------------------------------------------------------------------- interception


class _Stop(BaseException):
    """Ends a forward at its first non-finite operator. A BaseException, so that a program's
    own `except Exception:` does not swallow it."""


def _nonfinite_in(obj: Any) -> bool:
    if isinstance(obj, torch.Tensor):
        if not obj.is_floating_point():
            if obj.is_complex() and obj.numel() and obj.layout == torch.strided:
                return not bool(torch.isfinite(obj).all())
            return False
        if not obj.numel() or obj.layout != torch.strided:
            return False
        # A sum is finite only if every element is (inf + -inf is nan), and it is several times
        # cheaper than isfinite().all(); a non-finite sum may be mere overflow, so confirm it.
        if math.isfinite(float(obj.detach().sum())):
            return False
        return not bool(torch.isfinite(obj).all())
    if isinstance(obj, (tuple, list)):
        return any(_nonfinite_in(o) for o in obj)
    return False


def _nonfinite_tree(obj: Any) -> bool:
    leaves, _ = tree_flatten(obj)
    return any(_nonfinite_in(x) for x in leaves)


def _count_nonfinite(obj: Any) -> int:
    leaves, _ = tree_flatten(obj)
    return sum(int((~torch.isfinite(x)).sum()) for x in leaves
               if isinstance(x, torch.Tensor) and x.is_floating_point() and x.layout == torch.strided)


def _grad_float(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.requires_grad


def _dtype_of(obj: Any) -> torch.dtype:
    if isinstance(obj, torch.Tensor):
        return obj.dtype
    if isinstance(obj, (tuple, list)):
        for o in obj:
            if isinstance(o, torch.Tensor) and o.is_floating_point():
                return o.dtype
    return torch.float32


def _valued(proxy: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """An integer result's shadow: `out`'s own values (what a domain loss must judge: `x ^ x`
    is 0, `int8(0.7)` is 0) carrying `proxy`'s gradient. Boolean results keep their signed
    distance (positive where true), which says how far a comparison is from flipping."""
    if out.dtype == torch.bool or proxy.shape != out.shape:
        return proxy
    actual = out.to(proxy.dtype)
    if out.dtype in _WRAPPING:
        # A narrow integer that wrapped (uint8(6) - 7 is 255) is judged where the proxy's path
        # put it (-1): from 255 a domain loss would pull the operand down, away from the
        # values (7, 8) where the difference comes back into range.
        span = float(2 ** _WRAPPING[out.dtype])
        turns = torch.round((actual - proxy.detach()) / span)
        actual = actual - turns * span
    return proxy + (actual - proxy).detach()


_WRAPPING = {torch.uint8: 8, torch.int8: 8, torch.int16: 16}


def _with_gradient_floor(out: torch.Tensor, x: Any) -> torch.Tensor:
    """`out` plus GRADIENT_FLOOR times the identity's gradient on operand `x` (same values): a
    flat increasing op (tanhshrink near 0 in bfloat16) still tells which way x should move."""
    if _grad_float(x) and x.shape == out.shape:
        return out + GRADIENT_FLOOR * (x - x.detach()).to(out.dtype)
    return out


class _StraightThrough(torch.autograd.Function):
    """Returns `value` unchanged; its gradient goes to `proxy` as if the op were the identity."""

    @staticmethod
    def forward(ctx, value: torch.Tensor, proxy: torch.Tensor) -> torch.Tensor:
        ctx.proxy_shape = proxy.shape
        ctx.proxy_dtype = proxy.dtype
        return value.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        if grad.shape != ctx.proxy_shape:
            grad = grad.sum_to_size(ctx.proxy_shape)
        return None, grad.to(ctx.proxy_dtype)


class _TowardsRange(torch.autograd.Function):
    """A clamp's value (relu, hardtanh, clamp, ...) whose gradient goes to its operand as the
    identity's, except where the operand was clamped and the step would take it further out of
    the range: that never changes the result, and only lengthens the way back. (An lgamma of
    softshrink(hardtanh(w, -2, -1)) is at its pole 0 wherever w >= -1: pushed up, w would wander
    off for good; its gradient is cut instead, and the tie goes the other way, see TieBreak.)"""

    @staticmethod
    def forward(ctx, value: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x.detach() - value)  # > 0: clamped from above; < 0: from below
        ctx.x_dtype = x.dtype
        return value.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (excess,) = ctx.saved_tensors
        futile = ((excess > 0) & (grad < 0)) | ((excess < 0) & (grad > 0))
        return None, torch.where(futile, torch.zeros_like(grad), grad).to(ctx.x_dtype)


def _broadcastable_to(small: torch.Size, big: torch.Size) -> bool:
    if len(small) > len(big):
        return False
    return all(s == b or s == 1 for s, b in zip(reversed(small), reversed(big)))


def _group_norm_weight(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """group_norm with a bias but no weight has a backward that raises ("tensor does not have a
    device", torch 2.x): a weight of ones computes the same and lets the gradient reach the bias
    (log(group_norm(x, bias=b)) needs b above every standardised value)."""
    weight = args[2] if len(args) > 2 else kwargs.get("weight")
    bias = args[3] if len(args) > 3 else kwargs.get("bias")
    if weight is not None or not isinstance(bias, torch.Tensor) or not torch.is_grad_enabled():
        return args, kwargs
    ones = torch.ones_like(bias.detach())
    if len(args) > 2:
        return tuple(args[:2]) + (ones,) + tuple(args[3:]), kwargs
    return args, {**kwargs, "weight": ones}


def _call_on(func, flat: list, spec) -> Any:
    """func on shadow operands (flattened), or None where it raises."""
    try:
        s_args, s_kwargs = tree_unflatten(flat, spec)
        if isinstance(s_kwargs.get("dtype"), torch.dtype) and not s_kwargs["dtype"].is_floating_point:
            s_kwargs = {**s_kwargs, "dtype": None}  # cumsum(x, dtype=torch.int8): the proxy stays float
        return func(*s_args, **s_kwargs)
    except Exception:
        return None


def _without_some_gradients(func, args, kwargs) -> tuple[tuple, dict, Any]:
    """Run an op that raised with some operands carrying a gradient (batch_norm's running
    statistics, reached by a straight-through `detach`) with as few of them detached as it
    takes: the operands after the first, one at a time in order (so that batch_norm's weight
    and bias, after the statistics, keep theirs: log10 feeding its weight must be repairable),
    then all of them. The op's repair loss still sees the operands that keep a gradient."""
    flat, spec = tree_flatten((tuple(args[1:]), kwargs))
    for i, x in enumerate(flat):
        if not (isinstance(x, torch.Tensor) and x.requires_grad):
            continue
        flat[i] = x.detach()
        rest, d_kwargs = tree_unflatten(flat, spec)
        d_args = tuple(args[:1]) + tuple(rest)  # the data operand keeps its gradient if it can
        try:
            return d_args, d_kwargs, func(*d_args, **d_kwargs)
        except RuntimeError:
            continue
    d_args, d_kwargs = tree_map_only(torch.Tensor, torch.Tensor.detach, (tuple(args), kwargs))
    return d_args, d_kwargs, func(*d_args, **d_kwargs)


def _bound_gradient(func, args: tuple, kwargs: dict, out: torch.Tensor) -> torch.Tensor | None:
    """Zero-valued, with a clamp's own gradient in its tensor bounds (clamp(x, max=m): where m
    binds, the result moves with m). The straight-through stand-in that replaces the clamp's
    gradient reaches x alone; acosh(clip(x, max=m)) needs m >= 1 as much as x. None when no
    bound carries a gradient."""
    if not any(isinstance(b, torch.Tensor) and b.requires_grad for b in tree_flatten((args[1:], kwargs))[0]):
        return None
    x = args[0] if args else None
    if not isinstance(x, torch.Tensor):
        return None
    try:
        held = func(x.detach(), *args[1:], **kwargs)
    except (RuntimeError, TypeError):
        return None
    if not (isinstance(held, torch.Tensor) and held.requires_grad and held.shape == out.shape):
        return None
    return held - held.detach()


def _gradient_name(name: str, kwargs: dict) -> str:
    """The name an op's gradient treatment goes by: div(x, y, rounding_mode=...) is a floor
    division (no slope of its own either)."""
    if name == "div" and kwargs.get("rounding_mode") is not None:
        return "floor_divide"
    return name


def _smooth_proxy(name: str, args: tuple, kwargs: dict, out: torch.Tensor) -> torch.Tensor | None:
    """PROXY_GRADIENT's stand-in for op `name` (None: it has none, or none with a gradient)."""
    if name not in PROXY_GRADIENT:
        return None
    try:
        proxy = PROXY_GRADIENT[name](args, kwargs, out)
    except (RuntimeError, TypeError, ValueError):
        return None
    if isinstance(proxy, torch.Tensor) and proxy.is_floating_point() and proxy.requires_grad:
        return proxy
    return None


class _Interceptor(TorchFunctionMode):
    """Watches every operator call of a forward.

    Check mode (`searching=False`): remembers the first operator with a non-finite result and,
    if `abort`, stops the forward there. Search mode (`searching=True`, grad enabled): also
    builds the repair loss at the culprit, and rewires zero-gradient operators."""

    def __init__(self) -> None:
        super().__init__()
        self.searching = False
        self.abort = True
        self.seen: set[tuple[int, str]] = set()  # (call index, op) of earlier culprits
        # backward mode: the operator whose backward the last check found non-finite; the next
        # search run stops there with its derivative-pole loss (once: the check after it judges)
        self.grad_focus: tuple[int, str] | None = None
        self.reset()

    def reset(self) -> None:
        self.index = 0
        self.culprit: str | None = None
        self.culprit_key: tuple[int, str] | None = None
        self.loss: torch.Tensor | None = None
        self.loss_kind = "none"  # repair_loss's kind at the culprit
        self.bad_elements = 0  # non-finite elements of the culprit's result (check mode)
        self.culprit_dtype: torch.dtype | None = None
        self.hinges: list[torch.Tensor] = []
        self.shadows: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        info = op_info(func)
        self.index += 1
        if not self.searching:
            out = func(*args, **kwargs)
            target = args[0] if out is None and info.inplace and args else out
            if self.culprit is None and _nonfinite_in(target):
                self.culprit, self.culprit_key = info.name, (self.index, info.name)
                self.bad_elements = _count_nonfinite(target)
                if self.abort:
                    raise _Stop
            return out
        return self._search_call(func, info, args, kwargs)

    # -- search mode

    def _search_call(self, func, info, args, kwargs):
        if info.name == "group_norm":
            args, kwargs = _group_norm_weight(args, kwargs)
        pre = None
        if info.inplace and args and _grad_float(args[0]):
            pre = args[0].clone()  # the values before mutation, for the loss
        try:
            out = func(*args, **kwargs)
        except RuntimeError:
            d_args, d_kwargs, out = _without_some_gradients(func, args, kwargs)
            if out is None and info.inplace:
                args, kwargs = d_args, d_kwargs
        target = args[0] if out is None and info.inplace and args else out
        key = (self.index, info.name)
        if key == self.grad_focus:
            loss_args, loss_kwargs = self._loss_operands(pre, args, kwargs)
            self.culprit, self.culprit_key = info.name, key
            self.culprit_dtype = _dtype_of(target)
            self.loss, self.loss_kind = derivative_pole_loss(info.name, loss_args, loss_kwargs, self.culprit_dtype)
            raise _Stop
        if _nonfinite_in(target):
            loss_args, loss_kwargs = self._loss_operands(pre, args, kwargs)
            self.culprit, self.culprit_key = info.name, key
            self.culprit_dtype = _dtype_of(target)
            self.loss, self.loss_kind = repair_loss(info.name, loss_args, loss_kwargs, self.culprit_dtype)
            raise _Stop
        if key in self.seen:
            loss_args, loss_kwargs = self._loss_operands(pre, args, kwargs)
            hinge = hinge_for(info.name, loss_args, loss_kwargs, _dtype_of(target))
            if hinge is not None:
                self.hinges.append(hinge)
        if (isinstance(out, (tuple, list)) and self.shadows and not info.inplace and torch.is_grad_enabled()
                and out and all(isinstance(o, torch.Tensor) for o in out)):
            return self._through_shadows_multi(func, args, kwargs, out)
        if info.inplace or not isinstance(out, torch.Tensor) or not torch.is_grad_enabled():
            return out
        if self.shadows:
            out = self._through_shadows(func, args, kwargs, out)
        name = _gradient_name(info.name, kwargs)
        proxy = _smooth_proxy(name, args, kwargs, out) if out.is_floating_point() else None
        if proxy is not None and _broadcastable_to(proxy.shape, out.shape):
            out = _StraightThrough.apply(out.detach(), proxy)
        elif name in STRAIGHT_THROUGH and out.is_floating_point():
            x = args[0] if args else None
            bounds = _bound_gradient(func, args, kwargs, out) if name in CLAMPS else None
            if name in CLAMPS and _grad_float(x) and x.shape == out.shape:
                out = _TowardsRange.apply(out.detach(), x)  # (no gradient floor: see there)
                return out if bounds is None else out + bounds
            if _grad_float(x) and _broadcastable_to(x.shape, out.shape):
                out = _StraightThrough.apply(out.detach(), x)
                if bounds is not None:
                    out = out + bounds
            elif name in NO_DERIVATIVE:
                out = out.detach()  # no gradient beats a backward that raises
            if name in MONOTONE_FLAT and out.requires_grad:
                out = _with_gradient_floor(out, x)
        elif name in MONOTONE_FLAT and out.is_floating_point():
            out = _with_gradient_floor(out, args[0] if args else None)
        elif name in INT_CASTS and not out.is_floating_point():
            x = args[0] if args else None
            if _grad_float(x) and x.shape == out.shape:
                self.shadows[id(out)] = (out, _valued(x, out))
            elif (sx := self._shadow_of(x)) is not None and sx.shape == out.shape:
                self.shadows.setdefault(id(out), (out, _valued(sx, out)))  # integer to integer
        elif name in COMPARISONS and out.dtype == torch.bool:
            a = args[0] if args else None
            b = args[1] if len(args) > 1 else kwargs.get("other", 0.0 if name == "signbit" else None)
            if _grad_float(a) or _grad_float(b):
                try:
                    diff = (a - b) * COMPARISONS[name]
                except (RuntimeError, TypeError):
                    diff = None
                if isinstance(diff, torch.Tensor) and diff.is_floating_point() and diff.shape == out.shape:
                    self.shadows[id(out)] = (out, diff)
        return out

    def _loss_operands(self, pre, args, kwargs) -> tuple[tuple, dict]:
        """The operands a loss sees: values before an in-place change, and the float shadows
        of integer/boolean operands (which carry the gradient back to what made them)."""
        if pre is not None:
            args = (pre,) + tuple(args[1:])
        if not self.shadows:
            return tuple(args), kwargs
        flat, spec = tree_flatten((tuple(args), kwargs))
        flat = [s if (s := self._shadow_of(x)) is not None else x for x in flat]
        return tree_unflatten(flat, spec)

    def _shadow_of(self, x: Any) -> torch.Tensor | None:
        if isinstance(x, torch.Tensor):
            entry = self.shadows.get(id(x))
            if entry is not None and entry[0] is x:
                return entry[1]
        return None

    def _integer_proxy(self, func, args, kwargs, out: torch.Tensor) -> torch.Tensor | None:
        """A float stand-in for integer-only ops (bitwise ops, shifts, gcd/lcm) whose first
        shadowed operand carries the gradient: `x | 0`, `2 | x`, `x >> 1` move with x."""
        name = op_info(func).name
        if name not in INTEGER_PROXY:
            return None
        for x in tree_flatten((args, kwargs))[0]:
            s = self._shadow_of(x)
            if s is not None:
                proxy = INTEGER_PROXY[name](s)
                if proxy.shape != out.shape:
                    try:
                        proxy = proxy.expand(out.shape)
                    except RuntimeError:
                        return None
                return proxy
        return None

    def _through_shadows_multi(self, func, args, kwargs, out):
        """`_through_shadows` for ops with several results (cummax, sort, topk, max with dim):
        each result gets its own proxy's gradient."""
        flat, spec = tree_flatten((args, kwargs))
        shadows = [self._shadow_of(x) for x in flat]
        if all(s is None for s in shadows):
            return out
        try:
            s_args, s_kwargs = tree_unflatten([s if s is not None else x for x, s in zip(flat, shadows)], spec)
            proxies = func(*s_args, **s_kwargs)
        except Exception:
            return out
        if not isinstance(proxies, (tuple, list)) or len(proxies) != len(out):
            return out
        new = list(out)
        for k, (o, p) in enumerate(zip(out, proxies)):
            if not (isinstance(p, torch.Tensor) and p.is_floating_point() and p.requires_grad and p.shape == o.shape):
                continue
            if o.is_floating_point():
                new[k] = _StraightThrough.apply(o.detach(), p)
            else:
                self.shadows[id(o)] = (o, _valued(p, o))
        if all(a is b for a, b in zip(new, out)):
            return out
        try:
            return type(out)(new)
        except TypeError:
            return out

    def _through_shadows(self, func, args, kwargs, out: torch.Tensor) -> torch.Tensor:
        """If an argument is an integer/bool tensor with a float shadow, recompute the op on the
        shadows and let `out` carry that computation's gradient."""
        original, spec = tree_flatten((args, kwargs))
        flat = list(original)
        swapped = []
        for i, x in enumerate(flat):
            s = self._shadow_of(x)
            if s is not None:
                flat[i] = s
                swapped.append(i)
        if not swapped:
            return out
        proxy = _call_on(func, flat, spec)
        if proxy is None and len(swapped) > 1:
            # An index operand with a shadow of its own (gather(x, d, i % n), i an input): only
            # the first shadowed operand, the data, is swapped; the others stay integers.
            flat = list(original)
            flat[swapped[0]] = self._shadow_of(original[swapped[0]])
            proxy = _call_on(func, flat, spec)
        if proxy is None:  # the op insists on integer/bool operands (bitwise ops, where, ...)
            proxy = self._integer_proxy(func, args, kwargs, out)
            if proxy is None:
                return out
        if not (isinstance(proxy, torch.Tensor) and proxy.is_floating_point() and proxy.requires_grad):
            return out
        name = _gradient_name(op_info(func).name, kwargs)
        first = flat[0] if flat else None
        s_args, s_kwargs = tree_unflatten(flat, spec)
        smooth = _smooth_proxy(name, s_args, s_kwargs, proxy)
        if smooth is not None and smooth.shape == proxy.shape:
            # uint8(w) // 3 moves with w / 3: floor division of the float shadows has no slope
            proxy = smooth
        elif name in STRAIGHT_THROUGH and _grad_float(first) and _broadcastable_to(first.shape, proxy.shape):
            # sign(~x) moves with x; the op's own gradient stays (clamp(x, max=m) reaches m),
            # unless autograd has none (heaviside(x, v): its backward would raise)
            proxy = (proxy.detach() if name in NO_DERIVATIVE else proxy) + (first - first.detach())
        elif name in NO_DERIVATIVE:
            return out
        if out.is_floating_point():
            if _broadcastable_to(proxy.shape, out.shape):
                return _StraightThrough.apply(out.detach(), proxy)
        elif proxy.shape == out.shape:
            self.shadows[id(out)] = (out, _valued(proxy, out))
        return out


# --------------------------------------------------------------------------- one-shot checks


def _clone_tensors(inputs: tuple) -> tuple:
    flat, spec = tree_flatten(tuple(inputs))
    flat = [x.clone() if isinstance(x, torch.Tensor) else x for x in flat]
    return tree_unflatten(flat, spec)


def first_nonfinite(model: torch.nn.Module, inputs: tuple) -> str | None:
    """Name of the first operator (in execution order) whose result contains NaN or Inf,
    "output" if only the returned value does, None if the whole run is finite.

    Runs the model once under no_grad on copies of the inputs (so a forward that mutates its
    inputs leaves the caller's alone). Exceptions raised by the model propagate."""
    mode = _Interceptor()
    args = _clone_tensors(inputs)
    try:
        with torch.no_grad(), mode:
            out = model(*args)
    except _Stop:
        return mode.culprit
    return "output" if _nonfinite_tree(out) else None


def checked_call(model: torch.nn.Module, inputs: tuple) -> tuple[Any, str | None]:
    """Run the model to completion (as is: grad mode and inputs untouched) and return its
    output together with `first_nonfinite`'s answer for that same run."""
    mode = _Interceptor()
    mode.abort = False
    with mode:
        out = model(*inputs)
    culprit = mode.culprit
    if culprit is None and _nonfinite_tree(out):
        culprit = "output"
    return out, culprit


# --------------------------------------------------------------------------- diagnosis


class _Probe(TorchFunctionMode):
    """Records, per operator call, whether its result was non-finite although its operands were
    finite, and a fingerprint of those operands (to tell a constant operand from a varying one)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, Any]] = []  # (op name, "bad" | "ok" | "skip", fingerprint)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        info = op_info(func)
        leaves = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
        finite_in = not any(_nonfinite_in(x) for x in leaves)
        before = _fingerprint(leaves) if finite_in else None
        out = func(*args, **kwargs)
        target = args[0] if out is None and info.inplace and args else out
        if not finite_in:
            self.calls.append((info.name, "skip", None))
        elif _nonfinite_tree(target):
            self.calls.append((info.name, "bad", before))
        else:
            self.calls.append((info.name, "ok", None))
        return out


def _fingerprint(tensors: list[torch.Tensor]) -> tuple:
    parts = []
    for x in tensors:
        if x.layout != torch.strided or x.is_complex():
            parts.append((tuple(x.shape), str(x.dtype)))
            continue
        v = x.detach().to(torch.float64).flatten()
        ramp = torch.arange(1, v.numel() + 1, dtype=torch.float64)
        parts.append((tuple(x.shape), str(x.dtype), float(v.sum()), float((v * ramp).sum())))
    return tuple(parts)


def diagnose(model: torch.nn.Module, inputs: tuple, draws: int = 24, seed: int = 0) -> tuple[str, str] | None:
    """Whether a program is non-finite for *every* value, as far as random draws can tell.

    Runs the program on its own values and on `draws` fresh ones (inputs and weights resampled
    from the search's ranges, integer and boolean inputs included). An operator that is
    non-finite in every run where its operands were finite (at least three) cannot be repaired
    by any search: ("constant operand", op) when its operands were identical every time
    (`log(x - x)`, `rsqrt(isinf(x))`, `lgamma` of indices), ("non-finite in every draw", op)
    when they varied (`acosh(tanh(x))`, `std` with no degrees of freedom left, a pad value of
    inf; draws are evidence, not proof: a domain narrower than every draw lands here too).
    None otherwise.
    Slow (one full run per draw); meant for benchmarks and reports, not for every test. The
    model's parameters are left as they were."""
    cfg = ValueSearch(seed=seed)
    with torch.random.fork_rng(devices=[]), torch.inference_mode(False):
        run = _Run(cfg, model, tuple(inputs), time.perf_counter())
        try:
            runs = []
            for k in range(draws + 1):
                if k:
                    run._sample(all_slots=True)
                probe = _Probe()
                try:
                    run._forward(searching=False, mode=probe)
                except Exception:
                    pass
                runs.append(probe.calls)
        finally:
            run._finish(False, None, 0, initially_finite=False)
    n_calls = max(len(r) for r in runs)
    for i in range(n_calls):
        seen = [r[i] for r in runs if i < len(r)]
        names = {c[0] for c in seen}
        if len(names) != 1:
            continue  # control flow differs between runs: positions are not comparable
        bad = [c for c in seen if c[1] == "bad"]
        if len(bad) >= 3 and not any(c[1] == "ok" for c in seen):
            constant = len({c[2] for c in bad}) == 1
            return ("constant operand" if constant else "non-finite in every draw"), bad[0][0]
    return None


def diagnose_program(payload: dict) -> dict:
    """Worker job (`nnforge.oracle.value_search:diagnose_program`): `diagnose` on a program's
    own model and inputs, built as the oracle builds them (payload: program, seed)."""
    from nnforge.oracle.program_loader import load_program, unload_program

    module = load_program(payload["program"], name="program")
    try:
        seed = int(payload.get("seed", 0))
        torch.manual_seed(seed)
        model = module.Model()
        torch.manual_seed(seed)
        inputs = tuple(module.make_inputs())
        found = diagnose(model, inputs, seed=seed)
    finally:
        unload_program(module)
    return {"failure": found[0], "op": found[1]} if found else {"failure": None, "op": None}


# --------------------------------------------------------------------------- the search


class _GradWatch(TorchFunctionMode):
    """Numbers operator calls as _Interceptor does and hooks each result's autograd node, so
    that a backward names the first operator (in the order the backward meets them) that
    receives finite gradients and passes non-finite ones on to its inputs: the origin of a
    non-finite gradient, not the operators it then flows through."""

    def __init__(self) -> None:
        super().__init__()
        self.index = 0
        self.culprit: tuple[int, str] | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        info = op_info(func)
        self.index += 1
        out = func(*args, **kwargs)
        target = args[0] if out is None and info.inplace and args else out
        first = next((t for t in tree_flatten(target)[0] if isinstance(t, torch.Tensor)), None)
        node = getattr(first, "grad_fn", None)
        if node is not None:
            key = (self.index, info.name)
            node.register_hook(lambda to_inputs, from_outputs, key=key: self._seen(key, to_inputs, from_outputs))
        return out

    def _seen(self, key: tuple[int, str], to_inputs: tuple, from_outputs: tuple) -> None:
        if self.culprit is None and not _nonfinite_tree(list(from_outputs)) and _nonfinite_tree(list(to_inputs)):
            self.culprit = key


@dataclass
class _Slot:
    """One float tensor being optimised: `work` is what the program sees (original dtype and
    strides), `master` what Adam updates (the same tensor unless work is low precision)."""

    work: torch.Tensor
    master: torch.Tensor
    is_param: bool
    flat_index: int = -1  # position among the flattened inputs; -1 for parameters
    bounds: tuple[int, int] | None = None  # integer input: the range its values are drawn from
    reach: tuple[int, int] | None = None  # integer input: the range a gradient may move them in
    bin: Any = None  # the ValueBin whose property the values keep (oracle/value_bins.py), if any

    def shadow(self) -> torch.Tensor:
        """An integer input's float stand-in: equal to its values, with the master's gradient
        (straight through the rounding)."""
        return self.master + (self.work.to(self.master.dtype) - self.master).detach()


@dataclass
class _Outcome:
    culprit: str | None = None
    key: tuple[int, str] | None = None
    loss: torch.Tensor | None = None
    error: str | None = None
    loss_kind: str = "none"
    dtype: torch.dtype | None = None
    ties: bool = False  # the loss met values exactly on a forbidden point (safe_domain.TieBreak)
    poles: bool = False  # the run passed a gradient through an operator with a pole (PoleCrossing)
    gradient: bool = False  # the culprit's forward is finite, its backward is not (backward mode)


@dataclass(frozen=True)
class ValueSearch:
    """Gradient-guided search for values that keep every operator of a program finite.

    The search's whole configuration, passed as one object from the job to every part of the
    search: nothing it tunes is module state. `run` mutates the model's float parameters in
    place when it succeeds, and leaves them as they were when it fails. Deterministic for a
    given seed (up to where the time budget cuts the search)."""

    budget_ms: float = VALUE_SEARCH_BUDGET_MS
    max_iters: int = 1000
    seed: int = 0
    lr: float = 0.2
    patience: int = 12
    max_descent: int = 40  # gradient steps from one start before resampling
    # the test runs a backward: values count as finite only where the gradients are too
    backward: bool = False
    # a search with value bins keeps to them for this share of its budget before it gives them up
    bin_budget_share: float = 0.6
    sampling_ranges: tuple[tuple[float, float], ...] = SAMPLING_RANGES
    int_subranges: tuple[tuple[int | None, int | None], ...] = INT_SUBRANGES
    bool_densities: tuple[float, ...] = BOOL_DENSITIES
    # largest gradient element Adam sees (its square must stay finite in float32)
    max_gradient: float = 1e15
    # how many times max_descent a descent that keeps lowering its loss may run
    descent_extension: int = 3
    # the shortest step, as a share of the learning rate, that backtracking tries
    min_step_scale: float = 1.0 / 16
    # the longest: a step doubles while the culprit's loss steadily falls by less than
    # step_growth_below of itself (the values are far from the domain: digamma(int8(x)) needs
    # x >= 1 where x ~ y / 57, so y must travel from ~1 to 57, some 300 steps of the base
    # length), and is back to the base length when the loss rises
    max_step_scale: float = 64.0
    step_growth_below: float = 0.1
    step_growth_after: int = 2  # steps in a row without a rise before the first doubling
    # integer inputs move about a unit a step; longer steps would jump over the few values that work
    int_max_scale: float = 2.0

    def run(self, model: torch.nn.Module, inputs: tuple, plan: Any = None) -> SearchResult:
        """`plan` (oracle/value_bins.ValuePlan): the bins the values were drawn from, whose
        properties they keep while they are repaired. When no values inside them make the
        program finite within `bin_budget_share` of the budget, the search starts again from the
        program's own values, unconstrained, with a whole budget of its own, and
        `SearchResult.bins_kept` is False: a bin never costs a test its finiteness."""
        start = time.perf_counter()
        if plan is None or not plan.binned:
            with torch.random.fork_rng(devices=[]), torch.inference_mode(False):
                return _Run(self, model, tuple(inputs), start, plan).execute()
        inside = replace(self, budget_ms=self.budget_ms * self.bin_budget_share)
        with torch.random.fork_rng(devices=[]), torch.inference_mode(False):
            res = _Run(inside, model, tuple(inputs), start, plan).execute()
        if res.success:
            return res
        own = plan.restore_originals(model)
        with torch.random.fork_rng(devices=[]), torch.inference_mode(False):
            wider = _Run(self, model, tuple(own), time.perf_counter(), None).execute()
        return replace(wider, bins_kept=False, iterations=res.iterations + wider.iterations,
                       elapsed_ms=(time.perf_counter() - start) * 1000.0)


class _Run:
    """State of one search; lives for one `ValueSearch.run` call."""

    def __init__(self, cfg: ValueSearch, model: torch.nn.Module, inputs: tuple, start: float,
                 plan: Any = None) -> None:
        self.cfg = cfg
        self.model = model
        self.inputs = inputs
        self.start = start
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.mode = _Interceptor()
        self.flat, self.spec = tree_flatten(inputs)
        self.values = list(self.flat)  # current input leaves; float ones are slot work tensors
        self.slots: list[_Slot] = []
        self.bool_inputs: list[int] = []  # flat indices of boolean tensors (resampled only)
        by_id: dict[int, int] = {}
        for i, x in enumerate(self.flat):
            if not isinstance(x, torch.Tensor):
                continue
            if x.is_floating_point() and _dense(x):
                if id(x) in by_id:  # the same tensor passed twice stays one tensor
                    self.values[i] = self.values[by_id[id(x)]]
                    continue
                by_id[id(x)] = i
                work = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
                with torch.no_grad():
                    work.copy_(x.detach())
                work.requires_grad_(True)
                b = _constraint(plan.inputs.get(i) if plan is not None else None)
                self.slots.append(_Slot(work, _master(work, free=b is not None), False, i, bin=b))
                self.values[i] = work
            elif x.dtype == torch.bool and x.numel():
                if plan is None or plan.inputs.get(i) is None or plan.inputs[i].name == "normal":
                    self.bool_inputs.append(i)  # (a binned mask keeps its density: never resampled)
            elif not (x.is_floating_point() or x.is_complex()) and x.numel() and _dense(x):
                # Integers are optimised through a float master rounded into the original range;
                # the program sees integers, the operators a straight-through float shadow.
                if id(x) in by_id:
                    self.values[i] = self.values[by_id[id(x)]]
                    continue
                by_id[id(x)] = i
                work = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
                work.copy_(x)
                master = x.detach().to(torch.float32).requires_grad_(True)
                self.slots.append(_Slot(work, master, False, i, bounds=_int_bounds(x), reach=_int_reach(x),
                                        bin=_constraint(plan.inputs.get(i) if plan is not None else None)))
                self.values[i] = work
        self.params: list[tuple[torch.nn.Parameter, torch.Tensor, bool, Any]] = []
        for name, p in model.named_parameters():
            if p.is_floating_point() and _dense(p):
                self.params.append((p, p.detach().clone(), p.requires_grad, p.grad))
                p.requires_grad_(True)
                p.grad = None
                b = _constraint(plan.params.get(name) if plan is not None else None)
                self.slots.append(_Slot(p, _master(p, free=b is not None), True, bin=b))
        self.float_slots = any(s.bounds is None for s in self.slots)  # (integer steps stay short)
        self.int_slots = {i: s for s in self.slots if s.bounds is not None
                          for i, v in enumerate(self.values) if v is s.work}
        self.buffers = [(b, b.detach().clone()) for b in model.buffers()]
        # An integer master moves about one unit a step: less never changes the rounded value.
        self.adam = _Adam([s.master for s in self.slots], cfg.lr,
                          fixed_lrs=[1.0 if s.bounds is not None else None for s in self.slots],
                          int_max_scale=cfg.int_max_scale)
        self.samples = 0
        self.gradient_steps = 0
        self.replaced_nonfinite = False

    # -- running the program

    def _forward(self, searching: bool, mode: TorchFunctionMode | None = None) -> _Outcome:
        """One run of the program on the current values. `mode`: another interceptor to run
        under (diagnosis), whose outcome is the caller's to read; exceptions then propagate."""
        with torch.no_grad():
            for b, snapshot in self.buffers:
                b.copy_(snapshot)
        torch.default_generator.manual_seed(self.cfg.seed)
        if mode is not None:
            args = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in self.values]
            with torch.no_grad(), mode:
                self.model(*tree_unflatten(args, self.spec))
            return _Outcome()
        mode = self.mode
        mode.reset()
        mode.searching = searching
        TIES.clear()
        POLES.clear()
        if searching:
            args = [x.clone() if isinstance(x, torch.Tensor) else x for x in self.values]
            for i, slot in self.int_slots.items():
                mode.shadows[id(args[i])] = (args[i], slot.shadow())
        else:
            args = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in self.values]
        try:
            with (torch.enable_grad() if searching else torch.no_grad()):
                with mode:
                    out = self.model(*tree_unflatten(args, self.spec))
        except _Stop:
            return self._culprit_outcome()
        except Exception as e:
            if mode.culprit is not None:  # raised downstream of a NaN (say, NaN -> int index)
                return self._culprit_outcome()
            # the program itself failed: not something values can fix here
            return _Outcome(error=f"exception: {type(e).__name__}: {str(e)[:300]}")
        finally:
            mode.shadows = {}
            if searching:
                mode.grad_focus = None
        if mode.culprit is not None:
            return self._culprit_outcome()
        if _nonfinite_tree(out):
            return _Outcome("output", (-1, "output"), _total(None, mode.hinges), ties=TIES.seen, poles=POLES.seen)
        if not searching and self.cfg.backward:
            return self._backward_check()
        return _Outcome()

    def _backward_check(self) -> _Outcome:
        """Backward mode, on values whose forward is finite: run the program's backward (the
        outputs weighted by fixed random cotangents, as the test's own backward is) and name the
        operator whose backward made finite gradients non-finite; the next search run descends
        its derivative-pole loss (safe_domain.DERIVATIVE_POLES) there."""
        with torch.no_grad():
            for b, snapshot in self.buffers:
                b.copy_(snapshot)
        torch.default_generator.manual_seed(self.cfg.seed)
        args = [x.detach().clone().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point()
                else x.detach().clone() if isinstance(x, torch.Tensor) else x for x in self.values]
        watch = _GradWatch()
        try:
            with torch.enable_grad(), watch:
                out = self.model(*tree_unflatten(args, self.spec))
            leaves = {i: a for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad}
            bad = _nonfinite_tree(list(call_gradients(self.model, leaves, out, self.cfg.seed).values()))
        except Exception:  # a backward that raises is the test's to judge, not the search's
            return _Outcome()
        if not bad:
            return _Outcome()
        key = watch.culprit or (-1, "backward")
        self.mode.grad_focus = watch.culprit
        return _Outcome(key[1], key, None, gradient=True)

    def _culprit_outcome(self) -> _Outcome:
        mode = self.mode
        return _Outcome(mode.culprit, mode.culprit_key, _total(mode.loss, mode.hinges),
                        loss_kind=mode.loss_kind, dtype=mode.culprit_dtype, ties=TIES.seen, poles=POLES.seen)

    def _elapsed_ms(self) -> float:
        return (time.perf_counter() - self.start) * 1000.0

    # -- changing values

    def _gradient_step(self, loss: torch.Tensor | None, freeze_ints: bool = False) -> bool:
        """One Adam step on `loss`; `freeze_ints`: integer inputs stay where they are (their
        one-unit steps overshot, see `_search`). False when no gradient reached any value."""
        if loss is None or not self.slots or not loss.requires_grad or not bool(torch.isfinite(loss)):
            return False
        for s in self.slots:
            s.work.grad = None
            s.master.grad = None
        try:
            loss.backward()
        except RuntimeError:
            return False
        grads = []
        for s in self.slots:
            g = s.master.grad if s.bounds is not None else s.work.grad
            if g is None:
                continue
            s.work.grad = None
            if freeze_ints and s.bounds is not None:
                s.master.grad = None
                continue
            g = g.to(s.master.dtype) if g.dtype != s.master.dtype else g.clone()
            # sqrt(0)'s infinite slope, say; and finite slopes too steep for Adam's second moment,
            # whose float32 square overflows (x ** -80 at x = 0.5: 1e26, squared inf), so that
            # the update, m / sqrt(inf), would be 0 exactly where the loss is largest.
            s.master.grad = g.nan_to_num_(0.0, 1e6, -1e6).clamp_(-self.cfg.max_gradient, self.cfg.max_gradient)
            grads.append(g)
        if not grads or not any(bool(n) for n in torch._foreach_norm(grads)):
            return False
        self.adam.step()
        self._sync()
        self.gradient_steps += 1
        return True

    def _ints_moved(self, before: list[torch.Tensor]) -> bool:
        """Whether some integer input's value differs from what master values `before` give."""
        return any(s.bounds is not None and not torch.equal(s.work.to(b.dtype), b.round().clamp(s.reach[0], s.reach[1]))
                   for s, b in zip(self.slots, before))

    def _sync(self) -> None:
        with torch.no_grad():
            for s in self.slots:
                if s.bin is not None and s.bin.bounds_master:
                    s.master.copy_(s.bin.project(s.master))
                if s.bounds is not None:
                    lo, hi = s.reach
                    s.master.clamp_(lo - 0.49, hi + 0.49)
                    rounded = s.master.round()
                    s.work.copy_(rounded if s.bin is None else s.bin.project(rounded).round())
                elif s.bin is not None:  # the program sees the values in their bin, Adam moves the master
                    s.work.copy_(s.bin.project(s.master))
                elif s.master is not s.work:
                    s.work.copy_(s.master)
                s.master.grad = None

    def _snapshot(self) -> list[torch.Tensor]:
        return [s.master.detach().clone() for s in self.slots]

    def _restore(self, values: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for s, v in zip(self.slots, values):
                s.master.copy_(v)
        self._sync()

    def _sample(self, all_slots: bool = False) -> None:
        """Fresh values from the next range; parameters only every other time (unless
        `all_slots`), so that an input-driven culprit is first tried with the model's own weights."""
        lo, hi = self.cfg.sampling_ranges[self.samples % len(self.cfg.sampling_ranges)]
        has_inputs = any(not s.is_param for s in self.slots) or bool(self.bool_inputs)
        with torch.no_grad():
            for s in self.slots:
                if s.is_param and has_inputs and self.samples % 2 == 0 and not all_slots:
                    continue
                if s.bounds is not None:
                    fresh = self._draw_ints(s, self.samples)
                else:
                    fresh = torch.empty(s.master.shape, dtype=s.master.dtype).uniform_(lo, hi, generator=self.gen)
                s.master.copy_(fresh if s.bin is None else s.bin.into_bin(fresh))
            for i in self.bool_inputs:
                old = self.values[i]
                # Masks: half set, all set, none set, mostly set.
                self.values[i] = self._draw_mask(old, (0.5, 1.0, 0.0, 0.9)[self.samples % 4])
        self._sync()
        self.adam.reset()
        self.samples += 1

    def _draw_ints(self, s: _Slot, k: int) -> torch.Tensor:
        """Fresh master values for integer slot `s` from its k-th sub-range (`int_subranges`)."""
        ilo, ihi = _int_range(s.bounds, self.cfg.int_subranges[k % len(self.cfg.int_subranges)])
        return torch.randint(ilo, ihi + 1, s.master.shape, generator=self.gen).to(s.master.dtype)

    def _draw_mask(self, old: torch.Tensor, p_true: float) -> torch.Tensor:
        """A fresh boolean input like `old` (same strides), True with probability `p_true`."""
        fresh = torch.rand(old.shape, generator=self.gen) < p_true
        new = torch.empty_strided(old.shape, old.stride(), dtype=old.dtype, device=old.device)
        new.copy_(fresh)
        return new

    def _progress(self) -> tuple[int, int]:
        """How far a check run of the current values gets: the call index of its first
        non-finite operator (later is better), then fewer non-finite elements there.
        (BIG, 0) when the run is all finite; (-1, 0) when it raises."""
        out = self._forward(searching=False)
        if out.error is not None:
            return (-1, 0)
        if out.culprit is None:
            return (_ALL_FINITE, 0)
        if out.key is None or out.key[0] < 0:  # only the returned value is non-finite
            return (_ALL_FINITE - 1, 0)
        return (out.key[0], -self.mode.bad_elements)

    def _sweep(self, deadline: float) -> bool:
        """Greedy, one discrete input at a time: try each integer input on each of its
        sub-ranges (and each boolean input on each density), the others held, and keep the
        draw that gets furthest (see `_progress`). Integer inputs that must land in a narrow
        range ({0}, {1}, [1, 3], [-1, 1]) and several of them that need different ranges are
        out of reach of one joint draw. True when some draw made the whole run finite."""
        int_slots = [s for s in self.slots if s.bounds is not None]
        if not int_slots and not self.bool_inputs:
            return False
        best = self._progress()
        if best[0] == _ALL_FINITE:
            return True
        with torch.no_grad():
            for s in int_slots:
                keep = s.master.detach().clone()
                for k in range(len(self.cfg.int_subranges)):
                    if time.perf_counter() > deadline:
                        break
                    s.master.copy_(self._draw_ints(s, k))
                    self._sync()
                    p = self._progress()
                    if p[0] == _ALL_FINITE:
                        return True
                    if p > best:
                        best, keep = p, s.master.detach().clone()
                s.master.copy_(keep)
                self._sync()
            for i in self.bool_inputs:
                old = self.values[i]
                keep = old
                for p_true in self.cfg.bool_densities:
                    if time.perf_counter() > deadline:
                        break
                    new = self._draw_mask(old, p_true)
                    self.values[i] = new
                    p = self._progress()
                    if p[0] == _ALL_FINITE:
                        return True
                    if p > best:
                        best, keep = p, new
                self.values[i] = keep
        return False

    def _repair_nonfinite_start(self) -> None:
        """Values that are NaN/Inf to begin with are replaced before anything else."""
        with torch.no_grad():
            for s in self.slots:
                bad = ~torch.isfinite(s.master)
                if bool(bad.any()):
                    self.replaced_nonfinite = True
                    fresh = torch.empty(s.master.shape, dtype=s.master.dtype).uniform_(-1.0, 1.0, generator=self.gen)
                    s.master.copy_(torch.where(bad, fresh, s.master))
        self._sync()

    # -- the loop

    def execute(self) -> SearchResult:
        TIES.reset()
        try:
            first = self._forward(searching=False)
            if first.error is not None:
                return self._finish(False, first.error, 0, initially_finite=False, failure="program raises")
            if first.culprit is None:
                return self._finish(True, None, 0, initially_finite=True)
            return self._search(first)
        finally:
            self._restore_flags()
            TIES.reset()
            POLES.reset()

    def _search(self, first: _Outcome) -> SearchResult:
        cfg = self.cfg
        culprit = first.culprit
        last = first
        self._repair_nonfinite_start()
        origin = self._snapshot()  # the values the current descent started from
        iterations = 0
        use_grad = True
        last_key, best, stall, descent = None, math.inf, 0, 0
        first_loss = math.inf  # the culprit's loss when the descent reached it
        previous = math.inf  # the loss before the last step (same culprit), for the step length
        calm = 0  # steps in a row after which that loss did not rise
        frozen_at = None  # culprit key at which integer inputs stopped moving (see below)
        # Values exactly on a forbidden point (safe_domain.TieBreak) were just sent the other
        # way, for want of a gradient this way.
        turned = False
        undo: tuple[int, list[torch.Tensor]] | None = None  # (reach, values) before the last step
        # The budget starts after the first (checking) run: it pays one-off costs such as the
        # first call of an operator in this process, which are not the search's doing.
        deadline = time.perf_counter() + cfg.budget_ms / 1000.0
        while iterations < cfg.max_iters and time.perf_counter() < deadline:
            outcome = self._forward(searching=use_grad)
            if outcome.error is not None and use_grad:
                outcome = self._forward(searching=False)
                if outcome.error is None:
                    use_grad = False  # the instrumented run breaks the program: sample only
                    continue
                # else these values make the program raise (an integer division by zero...)
            if outcome.error is None and outcome.culprit is None:
                check = outcome if not use_grad else self._forward(searching=False)
                if check.error is None and check.culprit is None:
                    return self._finish(True, None, iterations, initially_finite=False)
                outcome = check
                if check.gradient and self.mode.grad_focus is not None:
                    culprit, last = check.culprit, check
                    iterations += 1
                    continue  # the next search run stops at the operator and descends its loss
            if undo is not None and _reach(outcome) < undo[0]:
                # The last step broke an operator that ran before the culprit it repaired (it
                # overshot into another's domain): take it back. If an integer input moved, try
                # again with integers held (their unit steps are coarse: acosh(y - acos(i)) must
                # not move i off 1); else try a shorter step.
                retry = frozen_at != undo[2] and self._ints_moved(undo[1])
                if retry:
                    frozen_at = undo[2]
                elif self.adam.scale > cfg.min_step_scale:
                    retry = True
                    self.adam.scale = min(self.adam.scale, 1.0) * 0.5
                if retry:
                    self._restore(undo[1])
                    undo = None
                    previous = math.inf  # the same loss comes back: no reason to lengthen steps
                    iterations += 1
                    continue
            if outcome.culprit is not None:
                culprit = outcome.culprit
                last = outcome
                if outcome.key is not None:
                    self.mode.seen.add(outcome.key)
            elif outcome.error is not None:
                culprit = outcome.error
                last = outcome
            stepped = False
            if (use_grad and undo is not None and outcome.loss is not None and outcome.key == last_key
                    and self.adam.scale > cfg.int_max_scale and self.float_slots
                    and float(outcome.loss.detach()) > previous):
                # A lengthened step overshot a narrow domain (erfinv(100 + x) needs x within
                # 1 of -100): take it back and go on a quarter as far. From where it landed,
                # the way back would take as many base-length steps as the way out did.
                self._restore(undo[1])
                self.adam.scale = max(self.adam.scale / 4.0, 1.0)
                undo, calm = None, 0
                iterations += 1
                continue
            undo = ((_reach(outcome), self._snapshot(), outcome.key)
                    if use_grad else None)
            if use_grad and outcome.loss is not None:
                value = float(outcome.loss.detach())
                if outcome.key == last_key and not value < best * 0.999 and value != previous:
                    stall += 1  # (an unchanged loss is a plateau of a step function being crossed)
                else:
                    stall = 0
                if outcome.key == last_key and value <= previous:
                    calm += 1
                    if calm >= cfg.step_growth_after and value > previous * (1.0 - cfg.step_growth_below):
                        self.adam.scale = min(self.adam.scale * 2.0, cfg.max_step_scale)
                else:
                    calm = 0
                    self.adam.scale = min(self.adam.scale, 1.0)
                previous = value
                if outcome.key != last_key:
                    first_loss = value
                best = value if outcome.key != last_key else min(best, value)
                last_key = outcome.key
                # A descent that has at least halved its culprit's domain loss is heading
                # somewhere: it may run on past max_descent (integers standardised by batch_norm
                # that must crowd around their mean). Not so a magnitude loss: shrinking
                # everything halves it at once, whether or not the overflow is any nearer its end.
                heading = outcome.loss_kind == "domain" and best < 0.5 * first_loss
                limit = cfg.max_descent * (cfg.descent_extension if heading else 1)
                if stall < cfg.patience and descent < limit:
                    stepped = self._gradient_step(outcome.loss, freeze_ints=frozen_at == outcome.key)
                    if not stepped and outcome.ties and not turned:
                        # No gradient leaves the ties this way (clamped): try the other way.
                        TIES.direction = -TIES.direction
                        turned, undo = True, None
                        iterations += 1
                        continue
                if not stepped and outcome.poles and not POLES.across:
                    # Stuck, or crawling towards an asymptote (log(1 / x), x < 0, sends x to
                    # -inf), on the near side of a pole (tan, a divisor): try crossing it, for
                    # at most `patience` steps, from where this descent began (the crawl may
                    # have gone far), with fresh momentum (the old one points the old way).
                    POLES.across = True
                    stall, best, previous, calm, undo = 0, math.inf, math.inf, 0, None
                    descent = max(0, cfg.max_descent - cfg.patience)
                    self._restore(origin)
                    self.adam.reset()
                    iterations += 1
                    continue
            if stepped:
                descent += 1
                turned = False
            else:
                undo = None
                TIES.reset()
                POLES.reset()
                turned = False
                self._sample()
                stall, last_key, best, descent, previous, frozen_at, calm = 0, None, math.inf, 0, math.inf, None, 0
                # The sweep costs a run per sub-range and discrete input: where a gradient
                # reached the culprit, give plain draws a turn in between.
                if (outcome.loss_kind == "none" or self.samples % 2 == 0) and self._sweep(deadline):
                    return self._finish(True, None, iterations + 1, initially_finite=False)
                origin = self._snapshot()
            iterations += 1
        return self._finish(False, culprit, iterations, initially_finite=False, failure=_failure_class(last))

    def _finish(self, success: bool, culprit: str | None, iterations: int, initially_finite: bool,
                failure: str | None = None) -> SearchResult:
        with torch.no_grad():
            for b, snapshot in self.buffers:
                b.copy_(snapshot)
            if not success:
                for p, original, _, _ in self.params:
                    p.copy_(original)
        if success:
            final = {}
            for s in self.slots:
                if not s.is_param:
                    orig = self.flat[s.flat_index]
                    final[id(s.work)] = s.work.detach().requires_grad_(orig.requires_grad)
            values = [final.get(id(x), x) if isinstance(x, torch.Tensor) else x for x in self.values]
            inputs = tuple(tree_unflatten(values, self.spec))
        if not success or initially_finite:  # nothing found, or nothing needed: the caller's own
            inputs = self.inputs
        if iterations == 0 and initially_finite:
            method = "none"
        elif self.samples or self.replaced_nonfinite:
            method = "sampling"
        elif self.gradient_steps:
            method = "gradient"
        else:
            method = "none"
        self._restore_flags()
        state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return SearchResult(
            success=success,
            inputs=inputs,
            state_dict=state,
            iterations=iterations,
            elapsed_ms=self._elapsed_ms(),
            culprit=culprit,
            initially_finite=initially_finite,
            method=method,
            failure=None if success else failure,
        )

    def _restore_flags(self) -> None:
        for p, _, requires_grad, grad in self.params:
            p.requires_grad_(requires_grad)
            p.grad = grad


# Why a search failed. The search itself tells the last four apart from what it saw at its
# last culprit; `diagnose` (a separate, slower probe) recognises the first two.
FAILURE_CLASSES = (
    "constant operand",  # the culprit's operands are the same whatever the values: log(x - x)
    "non-finite in every draw",  # operands vary, the op was non-finite in every random draw
    "program raises",  # the values the search reached make the program raise
    "no gradient path",  # outside the domain along operands no gradient reaches; sampling failed
    "low-precision overflow",  # float16/bfloat16 result overflows; shrinking did not cure it
    "overflow",  # float32/64 result overflows; shrinking did not cure it
    "search exhausted",  # a domain loss was descending when the budget ran out
)

_LOW_PRECISION = (torch.float16, torch.bfloat16)



def _reach(outcome: _Outcome) -> int:
    """How far a run got: the call index of its culprit (a run that raised got nowhere)."""
    if outcome.error is not None and outcome.culprit is None:
        return -1
    if outcome.key is None:
        return _ALL_FINITE
    return _ALL_FINITE - 1 if outcome.key[0] < 0 else outcome.key[0]


def _failure_class(last: _Outcome) -> str:
    if last.culprit is None and last.error is not None:
        return "program raises"
    if last.loss_kind == "domain":
        return "search exhausted"
    if last.loss_kind == "magnitude":
        return "low-precision overflow" if last.dtype in _LOW_PRECISION else "overflow"
    return "no gradient path"


class _Adam:
    """Adam over a few tensors, with a learning rate per tensor scaled to its magnitude.
    Written out because torch.optim's first use imports torch._dynamo (seconds) and its
    per-step bookkeeping costs more than the step itself for a handful of small tensors."""

    def __init__(self, params: list[torch.Tensor], lr: float, betas=(0.9, 0.999), eps: float = 1e-8,
                 fixed_lrs: list[float | None] | None = None, int_max_scale: float = 2.0) -> None:
        self.params = params
        self.int_max_scale = int_max_scale
        self.b1, self.b2 = betas
        self.eps = eps
        self.lrs = []
        self.fixed = [f is not None for f in (fixed_lrs or [None] * len(params))]
        for p, fixed in zip(params, fixed_lrs or [None] * len(params)):
            if fixed is not None:
                self.lrs.append(fixed)
                continue
            scale = float(p.detach().abs().max()) if p.numel() else 1.0
            self.lrs.append(lr * min(max(1.0, scale if math.isfinite(scale) else 1.0), 100.0))
        self.reset()

    def reset(self) -> None:
        self.scale = 1.0  # shrinks when a step overshoots, grows while steps are short (_Run._search)
        self.t = 0
        self.m = [None] * len(self.params)
        self.v = [None] * len(self.params)

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        c1 = 1.0 - self.b1**self.t
        c2 = 1.0 - self.b2**self.t
        ps, gs, ms, vs, steps = [], [], [], [], []
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            if self.m[i] is None:
                self.m[i] = torch.zeros_like(p)
                self.v[i] = torch.zeros_like(p)
            ps.append(p)
            gs.append(p.grad)
            ms.append(self.m[i])
            vs.append(self.v[i])
            scale = min(self.scale, self.int_max_scale) if self.fixed[i] else self.scale
            steps.append(-self.lrs[i] * scale / c1)
        if not ps:
            return
        # One fused call per formula line rather than one kernel per tensor.
        torch._foreach_mul_(ms, self.b1)
        torch._foreach_add_(ms, gs, alpha=1.0 - self.b1)
        torch._foreach_mul_(vs, self.b2)
        torch._foreach_addcmul_(vs, gs, gs, value=1.0 - self.b2)
        denom = torch._foreach_div(vs, c2)
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, self.eps)
        # Only elements with a gradient now move: a hinge that is satisfied (gradient 0) must not
        # be pushed back out of its domain by momentum left over from an earlier culprit.
        update = torch._foreach_div(ms, denom)
        torch._foreach_mul_(update, [g.ne(0).to(g.dtype) for g in gs])
        torch._foreach_mul_(update, steps)
        torch._foreach_add_(ps, update)


def _int_bounds(x: torch.Tensor) -> tuple[int, int]:
    """The range an integer input's values may take: the range they span, widened when they are
    all (nearly) equal, as a lone scalar's are, and in any case to [-INT_SEARCH_WIDEN,
    INT_SEARCH_WIDEN] (within the dtype). A handful of draws says little about the values a
    program needs: [0, 0] or [-6, 1] from randint(-8, 9) must still reach -1 (lgamma(-i)) or 2
    (log(digamma(i))). Indices need no tighter bound: a program that indexes with an input
    raises outside its range, and a step into such values is taken back like any other."""
    info = torch.iinfo(x.dtype)
    w = INT_SEARCH_WIDEN  # the generator's value facts count on this bound (core/dtypes.py)
    lo, hi = int(x.min()), int(x.max())
    if hi - lo < 2:
        lo, hi = lo - w, hi + w
    return max(info.min, min(lo, -w)), min(info.max, max(hi, w))


def _int_reach(x: torch.Tensor) -> tuple[int, int]:
    """The range a gradient may move an integer input's values in: its draw bounds
    (`_int_bounds`) widened to the range the generator's value facts count on, whatever the
    input's size (`int_search_range`). A scalar drawn as 3 must still get to -14
    (softshrink(i // -7, 1) is non-zero only there), and a [8, 16] input to -12 (expm1(i + 100)
    overflows above -12). Draws keep to the narrower bounds."""
    lo, hi = _int_bounds(x)
    s_lo, s_hi = int_search_range(from_torch(x.dtype))
    return min(lo, s_lo), max(hi, s_hi)


# Sub-ranges an integer input is resampled from (None: the input's own bound), in order: all of
# it, its positive part (divisors, logarithms), {-1, 0, 1} (inverse trigonometry), ones, zeros
# (erfinv, acos of i0), small positives, its negative part (sign of a bitwise not), {0, 1},
# minus ones, small values above one (lgamma, acosh).
_ALL_FINITE = 1 << 40


def _int_range(bounds: tuple[int, int], wanted: tuple[int | None, int | None]) -> tuple[int, int]:
    """The sub-range `wanted` (of ValueSearch.int_subranges) tried when an integer input is resampled, within its
    bounds (all of them when the two do not overlap)."""
    lo, hi = bounds
    wanted = (lo if wanted[0] is None else wanted[0], hi if wanted[1] is None else wanted[1])
    a, b = max(lo, wanted[0]), min(hi, wanted[1])
    return (a, b) if a <= b else (lo, hi)


def _dense(x: torch.Tensor) -> bool:
    """Strided and non-overlapping (an expanded view cannot be written element by element)."""
    if x.layout != torch.strided:
        return False
    return x.numel() == 0 or all(st != 0 or sz == 1 for sz, st in zip(x.shape, x.stride()))


def _master(work: torch.Tensor, free: bool = False) -> torch.Tensor:
    """What Adam moves for a float slot: the tensor itself, unless it is low precision or its
    values are projected into a bin (`free`), when the program sees them rounded or projected."""
    if work.dtype in (torch.float32, torch.float64) and not free:
        return work
    if work.dtype == torch.float64:
        return work.detach().clone().requires_grad_(True)
    return work.detach().float().requires_grad_(True)


def _constraint(b: Any) -> Any:
    """The bin a slot must keep to: only bins that constrain (oracle/value_bins.py)."""
    return b if b is not None and b.constrains else None


def _total(loss: torch.Tensor | None, hinges: list[torch.Tensor]) -> torch.Tensor | None:
    parts = [loss] if loss is not None else []
    parts += [h.to(torch.float32) if h.dtype != torch.float64 else h for h in hinges]
    if not parts:
        return None
    total = parts[0]
    for h in parts[1:]:
        total = total + h
    return total

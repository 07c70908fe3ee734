"""Interception: every operator call of a forward, seen as the program wrote it.

A `TorchFunctionMode` sees `torch.*` functions, `torch.nn.functional` calls, tensor methods,
operators, in-place calls and `x[i] = v`, each as one user-visible operator, above autograd, so
that a loss on an operator's inputs differentiates back to the model's inputs and weights.
`Interceptor` finds the first operator with a non-finite result (check mode) and, in search
mode, builds the repair loss there and rewires operators without a usable gradient (straight
through, towards a clamp's range, float shadows of integer and boolean results); `GradWatch`
names the operator whose backward turned finite gradients non-finite.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map_only, tree_unflatten

from nnforge.oracle.safe_domain import (
    CLAMPS, COMPARISONS, GRADIENT_FLOOR, INT_CASTS, MONOTONE_FLAT, NO_DERIVATIVE, PROXY_GRADIENT, STRAIGHT_THROUGH,
    LossMode, derivative_pole_loss, hinge_for, op_info, repair_loss,
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


class Stop(BaseException):
    """Ends a forward at its first non-finite operator. A BaseException, so that a program's
    own `except Exception:` does not swallow it."""


def nonfinite_in(obj: Any) -> bool:
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
        return any(nonfinite_in(o) for o in obj)
    return False


def nonfinite_tree(obj: Any) -> bool:
    leaves, _ = tree_flatten(obj)
    return any(nonfinite_in(x) for x in leaves)


def _count_nonfinite(obj: Any) -> int:
    leaves, _ = tree_flatten(obj)
    return sum(int((~torch.isfinite(x)).sum()) for x in leaves
               if isinstance(x, torch.Tensor) and x.is_floating_point() and x.layout == torch.strided)


def grad_float(x: Any) -> bool:
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
    if grad_float(x) and x.shape == out.shape:
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


def _smooth_proxy(name: str, args: tuple, kwargs: dict, out: torch.Tensor, mode: LossMode) -> torch.Tensor | None:
    """PROXY_GRADIENT's stand-in for op `name` (None: it has none, or none with a gradient)."""
    if name not in PROXY_GRADIENT:
        return None
    try:
        proxy = PROXY_GRADIENT[name](args, kwargs, out, mode)
    except (RuntimeError, TypeError, ValueError):
        return None
    if isinstance(proxy, torch.Tensor) and proxy.is_floating_point() and proxy.requires_grad:
        return proxy
    return None


class Interceptor(TorchFunctionMode):
    """Watches every operator call of a forward.

    Check mode (`searching=False`): remembers the first operator with a non-finite result and,
    if `abort`, stops the forward there. Search mode (`searching=True`, grad enabled): also
    builds the repair loss at the culprit, and rewires zero-gradient operators."""

    def __init__(self, loss_mode: LossMode) -> None:
        super().__init__()
        self.loss_mode = loss_mode  # the search's tie and pole switches, which its losses read
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
            if self.culprit is None and nonfinite_in(target):
                self.culprit, self.culprit_key = info.name, (self.index, info.name)
                self.bad_elements = _count_nonfinite(target)
                if self.abort:
                    raise Stop
            return out
        return self._search_call(func, info, args, kwargs)

    # -- search mode

    def _search_call(self, func, info, args, kwargs):
        if info.name == "group_norm":
            args, kwargs = _group_norm_weight(args, kwargs)
        pre = None
        if info.inplace and args and grad_float(args[0]):
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
            self.loss, self.loss_kind = derivative_pole_loss(info.name, loss_args, loss_kwargs, self.culprit_dtype,
                                                                 self.loss_mode)
            raise Stop
        if nonfinite_in(target):
            loss_args, loss_kwargs = self._loss_operands(pre, args, kwargs)
            self.culprit, self.culprit_key = info.name, key
            self.culprit_dtype = _dtype_of(target)
            self.loss, self.loss_kind = repair_loss(info.name, loss_args, loss_kwargs, self.culprit_dtype, self.loss_mode)
            raise Stop
        if key in self.seen:
            loss_args, loss_kwargs = self._loss_operands(pre, args, kwargs)
            hinge = hinge_for(info.name, loss_args, loss_kwargs, _dtype_of(target), self.loss_mode)
            if hinge is not None:
                self.hinges.append(hinge)
        return self._rewired(func, info, args, kwargs, out)

    def _rewired(self, func, info, args, kwargs, out):
        """`out`, carrying a gradient the search can use: a smooth proxy's, the identity's
        (straight through a step, towards a clamp's range), or, for an integer or boolean
        result, a float shadow's (a cast's operand, a comparison's signed distance)."""
        if (isinstance(out, (tuple, list)) and self.shadows and not info.inplace and torch.is_grad_enabled()
                and out and all(isinstance(o, torch.Tensor) for o in out)):
            return self._through_shadows_multi(func, args, kwargs, out)
        if info.inplace or not isinstance(out, torch.Tensor) or not torch.is_grad_enabled():
            return out
        if self.shadows:
            out = self._through_shadows(func, args, kwargs, out)
        name = _gradient_name(info.name, kwargs)
        proxy = _smooth_proxy(name, args, kwargs, out, self.loss_mode) if out.is_floating_point() else None
        if proxy is not None and _broadcastable_to(proxy.shape, out.shape):
            out = _StraightThrough.apply(out.detach(), proxy)
        elif name in STRAIGHT_THROUGH and out.is_floating_point():
            x = args[0] if args else None
            bounds = _bound_gradient(func, args, kwargs, out) if name in CLAMPS else None
            if name in CLAMPS and grad_float(x) and x.shape == out.shape:
                out = _TowardsRange.apply(out.detach(), x)  # (no gradient floor: see there)
                return out if bounds is None else out + bounds
            if grad_float(x) and _broadcastable_to(x.shape, out.shape):
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
            if grad_float(x) and x.shape == out.shape:
                self.shadows[id(out)] = (out, _valued(x, out))
            elif (sx := self._shadow_of(x)) is not None and sx.shape == out.shape:
                self.shadows.setdefault(id(out), (out, _valued(sx, out)))  # integer to integer
        elif name in COMPARISONS and out.dtype == torch.bool:
            a = args[0] if args else None
            b = args[1] if len(args) > 1 else kwargs.get("other", 0.0 if name == "signbit" else None)
            if grad_float(a) or grad_float(b):
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
        smooth = _smooth_proxy(name, s_args, s_kwargs, proxy, self.loss_mode)
        if smooth is not None and smooth.shape == proxy.shape:
            # uint8(w) // 3 moves with w / 3: floor division of the float shadows has no slope
            proxy = smooth
        elif name in STRAIGHT_THROUGH and grad_float(first) and _broadcastable_to(first.shape, proxy.shape):
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


class GradWatch(TorchFunctionMode):
    """Numbers operator calls as Interceptor does and hooks each result's autograd node, so
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
        if self.culprit is None and not nonfinite_tree(list(from_outputs)) and nonfinite_tree(list(to_inputs)):
            self.culprit = key

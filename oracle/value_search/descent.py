"""Gradient descent: an Adam step on a culprit's repair loss, in the masters of the slots.

A step clips what Adam sees (an infinite slope at sqrt(0), slopes whose float32 square would
overflow its second moment), moves integer masters about one unit (less never changes the
rounded value), and says whether any gradient reached a value at all: when none did, the
search resamples instead.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from nnforge.oracle.value_search.slots import SearchValues

if TYPE_CHECKING:
    from nnforge.oracle.value_search.search import ValueSearch


class Descent:
    """Adam over a search's slots; `steps` counts the steps taken."""

    def __init__(self, values: SearchValues, cfg: "ValueSearch") -> None:
        self.values = values
        self.cfg = cfg
        # An integer master moves about one unit a step: less never changes the rounded value.
        self.adam = Adam([s.master for s in values.slots], cfg.lr,
                         fixed_lrs=[1.0 if s.bounds is not None else None for s in values.slots],
                         int_max_scale=cfg.int_max_scale)
        self.steps = 0

    def step(self, loss: torch.Tensor | None, freeze_ints: bool = False) -> bool:
        """One Adam step on `loss`; `freeze_ints`: integer inputs stay where they are (their
        one-unit steps overshot, see SearchRun). False when no gradient reached any value."""
        slots = self.values.slots
        if loss is None or not slots or not loss.requires_grad or not bool(torch.isfinite(loss)):
            return False
        for s in slots:
            s.work.grad = None
            s.master.grad = None
        try:
            loss.backward()
        except RuntimeError:
            return False
        grads = []
        for s in slots:
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
        self.values.sync()
        self.steps += 1
        return True


class Adam:
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
        self.scale = 1.0  # shrinks when a step overshoots, grows while steps are short (SearchRun)
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

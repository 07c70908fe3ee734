"""The values a search moves: the program's float, integer and boolean inputs and its weights.

Each float or integer tensor is a `Slot`: `work` is what the program sees (its own dtype and
strides), `master` what a step or a draw changes (a float32 copy for low-precision and integer
tensors, and for values kept in a bin). `SearchValues` owns them for one search: it makes them
from the program's inputs and model, writes masters back into work tensors (`sync`), takes and
restores snapshots, and at the end gives back either the values found or the caller's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from nnforge.core.dtypes import INT_SEARCH_WIDEN, from_torch, int_search_range


@dataclass
class Slot:
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



class SearchValues:
    """The slots of one search, the boolean inputs (drawn, never descended), and what must be
    put back afterwards (parameters' values and flags, buffers)."""

    def __init__(self, model: torch.nn.Module, inputs: tuple, plan: Any = None) -> None:
        self.model = model
        self.inputs = inputs
        self.flat, self.spec = tree_flatten(inputs)
        self.values = list(self.flat)  # current input leaves; float ones are slot work tensors
        self.slots: list[Slot] = []
        self.bool_inputs: list[int] = []  # flat indices of boolean tensors (resampled only)
        by_id: dict[int, int] = {}
        for i, x in enumerate(self.flat):
            if isinstance(x, torch.Tensor):
                self._add_input(i, x, plan, by_id)
        self.params: list[tuple[torch.nn.Parameter, torch.Tensor, bool, Any]] = []
        for name, p in model.named_parameters():
            if p.is_floating_point() and dense(p):
                self.params.append((p, p.detach().clone(), p.requires_grad, p.grad))
                p.requires_grad_(True)
                p.grad = None
                b = constraint(plan.params.get(name) if plan is not None else None)
                self.slots.append(Slot(p, master_of(p, free=b is not None), True, bin=b))
        self.float_slots = any(s.bounds is None for s in self.slots)  # (integer steps stay short)
        self.int_slots = {i: s for s in self.slots if s.bounds is not None
                          for i, v in enumerate(self.values) if v is s.work}
        self.buffers = [(b, b.detach().clone()) for b in model.buffers()]

    def _add_input(self, i: int, x: torch.Tensor, plan: Any, by_id: dict[int, int]) -> None:
        if x.is_floating_point() and dense(x):
            if id(x) in by_id:  # the same tensor passed twice stays one tensor
                self.values[i] = self.values[by_id[id(x)]]
                return
            by_id[id(x)] = i
            work = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
            with torch.no_grad():
                work.copy_(x.detach())
            work.requires_grad_(True)
            b = constraint(plan.inputs.get(i) if plan is not None else None)
            self.slots.append(Slot(work, master_of(work, free=b is not None), False, i, bin=b))
            self.values[i] = work
        elif x.dtype == torch.bool and x.numel():
            if plan is None or plan.inputs.get(i) is None or plan.inputs[i].name == "normal":
                self.bool_inputs.append(i)  # (a binned mask keeps its density: never resampled)
        elif not (x.is_floating_point() or x.is_complex()) and x.numel() and dense(x):
            # Integers are optimised through a float master rounded into the original range;
            # the program sees integers, the operators a straight-through float shadow.
            if id(x) in by_id:
                self.values[i] = self.values[by_id[id(x)]]
                return
            by_id[id(x)] = i
            work = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
            work.copy_(x)
            master = x.detach().to(torch.float32).requires_grad_(True)
            self.slots.append(Slot(work, master, False, i, bounds=int_bounds(x), reach=int_reach(x),
                                   bin=constraint(plan.inputs.get(i) if plan is not None else None)))
            self.values[i] = work

    def restore_buffers(self) -> None:
        """Buffers as they were before the search (a forward may update running statistics)."""
        with torch.no_grad():
            for b, snapshot in self.buffers:
                b.copy_(snapshot)

    def sync(self) -> None:
        """Write every master into the tensor the program sees (rounded, projected into a bin)."""
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

    def snapshot(self) -> list[torch.Tensor]:
        return [s.master.detach().clone() for s in self.slots]

    def restore(self, values: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for s, v in zip(self.slots, values):
                s.master.copy_(v)
        self.sync()

    def ints_moved(self, before: list[torch.Tensor]) -> bool:
        """Whether some integer input's value differs from what master values `before` give."""
        return any(s.bounds is not None and not torch.equal(s.work.to(b.dtype), b.round().clamp(s.reach[0], s.reach[1]))
                   for s, b in zip(self.slots, before))

    def finish(self, success: bool, initially_finite: bool) -> tuple:
        """Put back what the search must not leave changed, and return the inputs to test: the
        values found, or (nothing found, or nothing needed) the caller's own. Parameters keep
        the values found only on success."""
        self.restore_buffers()
        if not success:
            with torch.no_grad():
                for p, original, _, _ in self.params:
                    p.copy_(original)
        inputs = self.inputs
        if success and not initially_finite:
            final = {}
            for s in self.slots:
                if not s.is_param:
                    orig = self.flat[s.flat_index]
                    final[id(s.work)] = s.work.detach().requires_grad_(orig.requires_grad)
            values = [final.get(id(x), x) if isinstance(x, torch.Tensor) else x for x in self.values]
            inputs = tuple(tree_unflatten(values, self.spec))
        self.restore_flags()
        return inputs

    def restore_flags(self) -> None:
        for p, _, requires_grad, grad in self.params:
            p.requires_grad_(requires_grad)
            p.grad = grad


def int_bounds(x: torch.Tensor) -> tuple[int, int]:
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


def int_reach(x: torch.Tensor) -> tuple[int, int]:
    """The range a gradient may move an integer input's values in: its draw bounds
    (`int_bounds`) widened to the range the generator's value facts count on, whatever the
    input's size (`int_search_range`). A scalar drawn as 3 must still get to -14
    (softshrink(i // -7, 1) is non-zero only there), and a [8, 16] input to -12 (expm1(i + 100)
    overflows above -12). Draws keep to the narrower bounds."""
    lo, hi = int_bounds(x)
    s_lo, s_hi = int_search_range(from_torch(x.dtype))
    return min(lo, s_lo), max(hi, s_hi)


def int_range(bounds: tuple[int, int], wanted: tuple[int | None, int | None]) -> tuple[int, int]:
    """The sub-range `wanted` (of ValueSearch.int_subranges) tried when an integer input is resampled, within its
    bounds (all of them when the two do not overlap)."""
    lo, hi = bounds
    wanted = (lo if wanted[0] is None else wanted[0], hi if wanted[1] is None else wanted[1])
    a, b = max(lo, wanted[0]), min(hi, wanted[1])
    return (a, b) if a <= b else (lo, hi)


def dense(x: torch.Tensor) -> bool:
    """Strided and non-overlapping (an expanded view cannot be written element by element)."""
    if x.layout != torch.strided:
        return False
    return x.numel() == 0 or all(st != 0 or sz == 1 for sz, st in zip(x.shape, x.stride()))


def master_of(work: torch.Tensor, free: bool = False) -> torch.Tensor:
    """What Adam moves for a float slot: the tensor itself, unless it is low precision or its
    values are projected into a bin (`free`), when the program sees them rounded or projected."""
    if work.dtype in (torch.float32, torch.float64) and not free:
        return work
    if work.dtype == torch.float64:
        return work.detach().clone().requires_grad_(True)
    return work.detach().float().requires_grad_(True)


def constraint(b: Any) -> Any:
    """The bin a slot must keep to: only bins that constrain (oracle/value_bins.py)."""
    return b if b is not None and b.constrains else None

"""Sweeps: one discrete input at a time, each of its sub-ranges or densities, the others held.

One joint draw rarely suits several integer or boolean inputs at once: integer inputs that must
land in a narrow range ({0}, {1}, [1, 3], [-1, 1]), and several of them that need different
ranges, are out of reach of resampling them together. A sweep keeps, per input, the draw that
gets furthest through the program (`progress`: a later first non-finite operator, then fewer
non-finite elements there).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

import torch

from nnforge.oracle.value_search.resample import Resampler
from nnforge.oracle.value_search.result import ALL_FINITE
from nnforge.oracle.value_search.slots import SearchValues

if TYPE_CHECKING:
    from nnforge.oracle.value_search.search import ValueSearch

Progress = Callable[[], tuple[int, int]]


def sweep(values: SearchValues, draws: Resampler, cfg: "ValueSearch", progress: Progress, deadline: float) -> bool:
    """Greedy over the integer inputs, then the boolean ones; True when some draw made the
    whole run finite (the values are left there), else each input keeps its best draw."""
    int_slots = [s for s in values.slots if s.bounds is not None]
    if not int_slots and not values.bool_inputs:
        return False
    best = progress()
    if best[0] == ALL_FINITE:
        return True
    with torch.no_grad():
        for s in int_slots:
            keep = s.master.detach().clone()
            for k in range(len(cfg.int_subranges)):
                if time.perf_counter() > deadline:
                    break
                s.master.copy_(draws.draw_ints(s, k))
                values.sync()
                p = progress()
                if p[0] == ALL_FINITE:
                    return True
                if p > best:
                    best, keep = p, s.master.detach().clone()
            s.master.copy_(keep)
            values.sync()
        for i in values.bool_inputs:
            old = values.values[i]
            keep = old
            for p_true in cfg.bool_densities:
                if time.perf_counter() > deadline:
                    break
                new = draws.draw_mask(old, p_true)
                values.values[i] = new
                p = progress()
                if p[0] == ALL_FINITE:
                    return True
                if p > best:
                    best, keep = p, new
            values.values[i] = keep
    return False

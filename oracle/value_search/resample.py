"""Resampling: fresh values when a descent has no gradient to follow or stops making progress.

Float values are drawn from the search's ranges in turn (`ValueSearch.sampling_ranges`), the
model's weights only every other time, so that a culprit driven by the inputs is first tried
with the model's own weights; integer inputs from sub-ranges that domains favour
(`int_subranges`), boolean inputs at a density (half, all, none, mostly set). Values kept in a
bin are drawn inside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from nnforge.oracle.value_search.descent import Descent
from nnforge.oracle.value_search.slots import SearchValues, Slot, int_range

if TYPE_CHECKING:
    from nnforge.oracle.value_search.search import ValueSearch


class Resampler:
    """Draws for one search; `count` says how many draws it made (the k-th uses the k-th range)."""

    def __init__(self, values: SearchValues, cfg: "ValueSearch", gen: torch.Generator, descent: Descent) -> None:
        self.values = values
        self.cfg = cfg
        self.gen = gen
        self.descent = descent
        self.count = 0
        self.replaced_nonfinite = False

    def sample(self, all_slots: bool = False) -> None:
        """Fresh values from the next range; parameters only every other time (unless
        `all_slots`). The descent's momentum is dropped: it points the old values' way."""
        v = self.values
        lo, hi = self.cfg.sampling_ranges[self.count % len(self.cfg.sampling_ranges)]
        has_inputs = any(not s.is_param for s in v.slots) or bool(v.bool_inputs)
        with torch.no_grad():
            for s in v.slots:
                if s.is_param and has_inputs and self.count % 2 == 0 and not all_slots:
                    continue
                if s.bounds is not None:
                    fresh = self.draw_ints(s, self.count)
                else:
                    fresh = torch.empty(s.master.shape, dtype=s.master.dtype).uniform_(lo, hi, generator=self.gen)
                s.master.copy_(fresh if s.bin is None else s.bin.into_bin(fresh))
            for i in v.bool_inputs:
                old = v.values[i]
                # Masks: half set, all set, none set, mostly set.
                v.values[i] = self.draw_mask(old, (0.5, 1.0, 0.0, 0.9)[self.count % 4])
        v.sync()
        self.descent.adam.reset()
        self.count += 1

    def draw_ints(self, s: Slot, k: int) -> torch.Tensor:
        """Fresh master values for integer slot `s` from its k-th sub-range (`int_subranges`)."""
        ilo, ihi = int_range(s.bounds, self.cfg.int_subranges[k % len(self.cfg.int_subranges)])
        return torch.randint(ilo, ihi + 1, s.master.shape, generator=self.gen).to(s.master.dtype)

    def draw_mask(self, old: torch.Tensor, p_true: float) -> torch.Tensor:
        """A fresh boolean input like `old` (same strides), True with probability `p_true`."""
        fresh = torch.rand(old.shape, generator=self.gen) < p_true
        new = torch.empty_strided(old.shape, old.stride(), dtype=old.dtype, device=old.device)
        new.copy_(fresh)
        return new

    def replace_nonfinite(self) -> None:
        """Values that are NaN/Inf to begin with are replaced before anything else."""
        v = self.values
        with torch.no_grad():
            for s in v.slots:
                bad = ~torch.isfinite(s.master)
                if bool(bad.any()):
                    self.replaced_nonfinite = True
                    fresh = torch.empty(s.master.shape, dtype=s.master.dtype).uniform_(-1.0, 1.0, generator=self.gen)
                    s.master.copy_(torch.where(bad, fresh, s.master))
        v.sync()

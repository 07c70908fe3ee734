"""`ValueSearch`: the search's whole configuration, and its entry point `run`.

Every tuning constant of the search is a field of this one frozen object, passed whole from
the job to every part (the run, the descent, the draws, the sweep): nothing the search tunes
is module state, and a benchmark or a test that wants another setting builds another config.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import torch

from nnforge.core.limits import VALUE_SEARCH_BUDGET_MS
from nnforge.oracle.value_search.result import SearchResult
from nnforge.oracle.value_search.run import SearchRun

# Ranges tried, in order, when values are resampled instead of descended.
SAMPLING_RANGES: tuple[tuple[float, float], ...] = (
    (-1.0, 1.0),
    (0.5, 2.0),
    (-0.2, 0.2),
    (0.1, 1.0),
    (-3.0, 3.0),
    (-0.02, 0.02),  # deep chains of products overflow (or leave acos's domain) unless tiny
)
# Sub-ranges an integer input is resampled from (None: the input's own bound; see slots.int_range),
# in order: all of it, its positive part (divisors, logarithms), {-1, 0, 1} (inverse trigonometry),
# ones, zeros (erfinv, acos of i0), small positives, its negative part (sign of a bitwise not),
# {0, 1}, minus ones, small values above one (lgamma, acosh).
INT_SUBRANGES: tuple[tuple[int | None, int | None], ...] = (
    (None, None), (1, None), (-1, 1), (1, 1), (0, 0), (1, 3), (None, -1), (0, 1), (-1, -1), (2, 4),
)
# Shares of True a boolean input is resampled with.
BOOL_DENSITIES = (0.5, 1.0, 0.0, 0.9, 0.1)


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
                return SearchRun(self, model, tuple(inputs), start, plan).execute()
        inside = replace(self, budget_ms=self.budget_ms * self.bin_budget_share)
        with torch.random.fork_rng(devices=[]), torch.inference_mode(False):
            res = SearchRun(inside, model, tuple(inputs), start, plan).execute()
        if res.success:
            return res
        own = plan.restore_originals(model)
        with torch.random.fork_rng(devices=[]), torch.inference_mode(False):
            wider = SearchRun(self, model, tuple(own), time.perf_counter(), None).execute()
        return replace(wider, bins_kept=False, iterations=res.iterations + wider.iterations,
                       elapsed_ms=(time.perf_counter() - start) * 1000.0)

"""One search: the loop that descends, takes back, lengthens, crosses poles and resamples.

Each iteration runs the program under the interceptor (intercept.py) on the current values.
The first operator with a non-finite result is the culprit; an Adam step (descent.py) goes down
its repair loss plus the hinges of earlier culprits. A step after which an operator *before*
the culprit fails (it overshot into another operator's forbidden region) is taken back and
retried with integer inputs held (if one of them moved), else at half the length; steps double
while the loss falls steadily but slowly, or stays exactly level on the plateau of a step
function, and a lengthened step after which the loss rises is taken back and shortened. When
there is no usable gradient, the loss stops falling, or `max_descent` steps from one start have
not succeeded, the values are drawn afresh (resample.py), followed by a sweep (sweep.py).
Values exactly on a forbidden point are first sent the other way (safe_domain.TieBreak), and a
descent stuck on the near side of a pole first tries crossing it (safe_domain.PoleCrossing).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_unflatten

from nnforge.core.backward import call_gradients
from nnforge.oracle.safe_domain import LossMode
from nnforge.oracle.value_search.descent import Descent
from nnforge.oracle.value_search.intercept import GradWatch, Interceptor, Stop, nonfinite_tree
from nnforge.oracle.value_search.resample import Resampler
from nnforge.oracle.value_search.result import ALL_FINITE, Outcome, SearchResult, failure_class, reach, total_loss
from nnforge.oracle.value_search.slots import SearchValues
from nnforge.oracle.value_search.sweep import sweep

if TYPE_CHECKING:
    from nnforge.oracle.value_search.search import ValueSearch


@dataclass
class _Walk:
    """Where the current descent stands (reset by a draw)."""

    origin: list[torch.Tensor]  # the values this descent started from
    last_key: tuple[int, str] | None = None  # the culprit of the last step
    best: float = math.inf  # its lowest loss so far
    first_loss: float = math.inf  # its loss when the descent reached it
    previous: float = math.inf  # the loss before the last step (same culprit), for the step length
    stall: int = 0  # steps in a row that did not lower the best loss
    calm: int = 0  # steps in a row after which the loss did not rise
    steps: int = 0  # steps of this descent
    frozen_at: tuple[int, str] | None = None  # culprit at which integer inputs stopped moving
    turned: bool = False  # ties were just sent the other way, for want of a gradient this way
    undo: tuple[int, list[torch.Tensor], Any] | None = None  # (reach, values, key) before the last step


class SearchRun:
    """State of one search; lives for one `ValueSearch.run` call."""

    def __init__(self, cfg: "ValueSearch", model: torch.nn.Module, inputs: tuple, start: float,
                 plan: Any = None) -> None:
        self.cfg = cfg
        self.model = model
        self.start = start
        self.loss_mode = LossMode()  # flipped by this run alone (see _descend), read by its losses
        self.interceptor = Interceptor(self.loss_mode)
        self.values = SearchValues(model, inputs, plan)
        self.descent = Descent(self.values, cfg)
        self.draws = Resampler(self.values, cfg, torch.Generator().manual_seed(cfg.seed), self.descent)
        self.use_grad = True
        self.culprit: str | None = None
        self.last = Outcome()

    # -- running the program

    def forward(self, searching: bool, mode: TorchFunctionMode | None = None) -> Outcome:
        """One run of the program on the current values. `mode`: another interceptor to run
        under (diagnosis), whose outcome is the caller's to read; exceptions then propagate."""
        v = self.values
        v.restore_buffers()
        torch.default_generator.manual_seed(self.cfg.seed)
        if mode is not None:
            args = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in v.values]
            with torch.no_grad(), mode:
                self.model(*tree_unflatten(args, v.spec))
            return Outcome()
        mode = self.interceptor
        mode.reset()
        mode.searching = searching
        self.loss_mode.clear()
        if searching:
            args = [x.clone() if isinstance(x, torch.Tensor) else x for x in v.values]
            for i, slot in v.int_slots.items():
                mode.shadows[id(args[i])] = (args[i], slot.shadow())
        else:
            args = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in v.values]
        try:
            with (torch.enable_grad() if searching else torch.no_grad()):
                with mode:
                    out = self.model(*tree_unflatten(args, v.spec))
        except Stop:
            return self._culprit_outcome()
        except Exception as e:
            if mode.culprit is not None:  # raised downstream of a NaN (say, NaN -> int index)
                return self._culprit_outcome()
            # the program itself failed: not something values can fix here
            return Outcome(error=f"exception: {type(e).__name__}: {str(e)[:300]}")
        finally:
            mode.shadows = {}
            if searching:
                mode.grad_focus = None
        if mode.culprit is not None:
            return self._culprit_outcome()
        if nonfinite_tree(out):
            return Outcome("output", (-1, "output"), total_loss(None, mode.hinges), ties=self.loss_mode.ties.seen, poles=self.loss_mode.poles.seen)
        if not searching and self.cfg.backward:
            return self._backward_check()
        return Outcome()

    def _backward_check(self) -> Outcome:
        """Backward mode, on values whose forward is finite: run the program's backward (the
        outputs weighted by fixed random cotangents, as the test's own backward is) and name the
        operator whose backward made finite gradients non-finite; the next search run descends
        its derivative-pole loss (safe_domain.DERIVATIVE_POLES) there."""
        v = self.values
        v.restore_buffers()
        torch.default_generator.manual_seed(self.cfg.seed)
        args = [x.detach().clone().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point()
                else x.detach().clone() if isinstance(x, torch.Tensor) else x for x in v.values]
        watch = GradWatch()
        try:
            with torch.enable_grad(), watch:
                out = self.model(*tree_unflatten(args, v.spec))
            leaves = {i: a for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad}
            bad = nonfinite_tree(list(call_gradients(self.model, leaves, out, self.cfg.seed).values()))
        except Exception:  # a backward that raises is the test's to judge, not the search's
            return Outcome()
        if not bad:
            return Outcome()
        key = watch.culprit or (-1, "backward")
        self.interceptor.grad_focus = watch.culprit
        return Outcome(key[1], key, None, gradient=True)

    def _culprit_outcome(self) -> Outcome:
        mode = self.interceptor
        return Outcome(mode.culprit, mode.culprit_key, total_loss(mode.loss, mode.hinges),
                       loss_kind=mode.loss_kind, dtype=mode.culprit_dtype, ties=self.loss_mode.ties.seen, poles=self.loss_mode.poles.seen)

    def progress(self) -> tuple[int, int]:
        """How far a check run of the current values gets: the call index of its first
        non-finite operator (later is better), then fewer non-finite elements there.
        (ALL_FINITE, 0) when the run is all finite; (-1, 0) when it raises."""
        out = self.forward(searching=False)
        if out.error is not None:
            return (-1, 0)
        if out.culprit is None:
            return (ALL_FINITE, 0)
        if out.key is None or out.key[0] < 0:  # only the returned value is non-finite
            return (ALL_FINITE - 1, 0)
        return (out.key[0], -self.interceptor.bad_elements)

    # -- the loop

    def execute(self) -> SearchResult:
        self.loss_mode.ties.reset()
        try:
            first = self.forward(searching=False)
            if first.error is not None:
                return self.finish(False, first.error, 0, initially_finite=False, failure="program raises")
            if first.culprit is None:
                return self.finish(True, None, 0, initially_finite=True)
            return self._search(first)
        finally:
            self.values.restore_flags()
            self.loss_mode.reset()

    def _search(self, first: Outcome) -> SearchResult:
        cfg = self.cfg
        self.culprit, self.last = first.culprit, first
        self.draws.replace_nonfinite()
        walk = _Walk(origin=self.values.snapshot())
        iterations = 0
        # The budget starts after the first (checking) run: it pays one-off costs such as the
        # first call of an operator in this process, which are not the search's doing.
        deadline = time.perf_counter() + cfg.budget_ms / 1000.0
        while iterations < cfg.max_iters and time.perf_counter() < deadline:
            outcome = self.forward(searching=self.use_grad)
            if outcome.error is not None and self.use_grad:
                outcome = self.forward(searching=False)
                if outcome.error is None:
                    self.use_grad = False  # the instrumented run breaks the program: sample only
                    continue
                # else these values make the program raise (an integer division by zero...)
            if outcome.error is None and outcome.culprit is None:
                check = outcome if not self.use_grad else self.forward(searching=False)
                if check.error is None and check.culprit is None:
                    return self.finish(True, None, iterations, initially_finite=False)
                outcome = check
                if check.gradient and self.interceptor.grad_focus is not None:
                    self.culprit, self.last = check.culprit, check
                    iterations += 1
                    continue  # the next search run stops at the operator and descends its loss
            if self._took_back(outcome, walk):
                iterations += 1
                continue
            self._note_culprit(outcome)
            if self._shortened(outcome, walk):
                iterations += 1
                continue
            walk.undo = (reach(outcome), self.values.snapshot(), outcome.key) if self.use_grad else None
            stepped, again = self._descend(outcome, walk)
            if again:
                iterations += 1
                continue
            if stepped:
                walk.steps += 1
                walk.turned = False
            elif self._redraw(outcome, walk, deadline):
                return self.finish(True, None, iterations + 1, initially_finite=False)
            iterations += 1
        return self.finish(False, self.culprit, iterations, initially_finite=False, failure=failure_class(self.last))

    def _took_back(self, outcome: Outcome, walk: _Walk) -> bool:
        """The last step broke an operator that ran before the culprit it repaired (it overshot
        into another's domain): take it back. If an integer input moved, try again with integers
        held (their unit steps are coarse: acosh(y - acos(i)) must not move i off 1); else try a
        shorter step. False when there is nothing to take back or no shorter step is left."""
        undo, adam = walk.undo, self.descent.adam
        if undo is None or reach(outcome) >= undo[0]:
            return False
        retry = walk.frozen_at != undo[2] and self.values.ints_moved(undo[1])
        if retry:
            walk.frozen_at = undo[2]
        elif adam.scale > self.cfg.min_step_scale:
            retry = True
            adam.scale = min(adam.scale, 1.0) * 0.5
        if not retry:
            return False
        self.values.restore(undo[1])
        walk.undo = None
        walk.previous = math.inf  # the same loss comes back: no reason to lengthen steps
        return True

    def _note_culprit(self, outcome: Outcome) -> None:
        if outcome.culprit is not None:
            self.culprit, self.last = outcome.culprit, outcome
            if outcome.key is not None:
                self.interceptor.seen.add(outcome.key)
        elif outcome.error is not None:
            self.culprit, self.last = outcome.error, outcome

    def _shortened(self, outcome: Outcome, walk: _Walk) -> bool:
        """A lengthened step overshot a narrow domain (erfinv(100 + x) needs x within 1 of
        -100): take it back and go on a quarter as far. From where it landed, the way back
        would take as many base-length steps as the way out did."""
        adam = self.descent.adam
        if not (self.use_grad and walk.undo is not None and outcome.loss is not None and outcome.key == walk.last_key
                and adam.scale > self.cfg.int_max_scale and self.values.float_slots
                and float(outcome.loss.detach()) > walk.previous):
            return False
        self.values.restore(walk.undo[1])
        adam.scale = max(adam.scale / 4.0, 1.0)
        walk.undo, walk.calm = None, 0
        return True

    def _descend(self, outcome: Outcome, walk: _Walk) -> tuple[bool, bool]:
        """A step down the culprit's loss: (stepped, again), `again` when the next iteration
        should run at once (the ties were turned, or the pole is to be crossed)."""
        cfg = self.cfg
        if not (self.use_grad and outcome.loss is not None):
            return False, False
        self._track(outcome, walk)
        # A descent that has at least halved its culprit's domain loss is heading somewhere: it
        # may run on past max_descent (integers standardised by batch_norm that must crowd
        # around their mean). Not so a magnitude loss: shrinking everything halves it at once,
        # whether or not the overflow is any nearer its end.
        heading = outcome.loss_kind == "domain" and walk.best < 0.5 * walk.first_loss
        limit = cfg.max_descent * (cfg.descent_extension if heading else 1)
        stepped = False
        if walk.stall < cfg.patience and walk.steps < limit:
            stepped = self.descent.step(outcome.loss, freeze_ints=walk.frozen_at == outcome.key)
            if not stepped and outcome.ties and not walk.turned:
                # No gradient leaves the ties this way (clamped): try the other way.
                self.loss_mode.ties.direction = -self.loss_mode.ties.direction
                walk.turned, walk.undo = True, None
                return False, True
        if not stepped and outcome.poles and not self.loss_mode.poles.across:
            # Stuck, or crawling towards an asymptote (log(1 / x), x < 0, sends x to -inf), on
            # the near side of a pole (tan, a divisor): try crossing it, for at most `patience`
            # steps, from where this descent began (the crawl may have gone far), with fresh
            # momentum (the old one points the old way).
            self.loss_mode.poles.across = True
            walk.stall, walk.best, walk.previous, walk.calm, walk.undo = 0, math.inf, math.inf, 0, None
            walk.steps = max(0, cfg.max_descent - cfg.patience)
            self.values.restore(walk.origin)
            self.descent.adam.reset()
            return False, True
        return stepped, False

    def _track(self, outcome: Outcome, walk: _Walk) -> None:
        """Book the culprit's loss: stalls, and the step length (doubled while the loss falls
        steadily but by little, or stays exactly level on a step function's plateau; back to
        the base length when it rises)."""
        cfg, adam = self.cfg, self.descent.adam
        value = float(outcome.loss.detach())
        same = outcome.key == walk.last_key
        if same and not value < walk.best * 0.999 and value != walk.previous:
            walk.stall += 1  # (an unchanged loss is a plateau of a step function being crossed)
        else:
            walk.stall = 0
        if same and value <= walk.previous:
            walk.calm += 1
            if walk.calm >= cfg.step_growth_after and value > walk.previous * (1.0 - cfg.step_growth_below):
                adam.scale = min(adam.scale * 2.0, cfg.max_step_scale)
        else:
            walk.calm = 0
            adam.scale = min(adam.scale, 1.0)
        walk.previous = value
        if not same:
            walk.first_loss = value
        walk.best = value if not same else min(walk.best, value)
        walk.last_key = outcome.key

    def _redraw(self, outcome: Outcome, walk: _Walk, deadline: float) -> bool:
        """Fresh values, a new descent from them, and (every other draw where a gradient reached
        the culprit: a sweep costs a run per sub-range and discrete input) a sweep. True when
        the sweep made the whole run finite."""
        self.loss_mode.reset()
        self.draws.sample()
        walk.undo, walk.turned, walk.stall, walk.last_key, walk.best = None, False, 0, None, math.inf
        walk.steps, walk.previous, walk.frozen_at, walk.calm = 0, math.inf, None, 0
        if (outcome.loss_kind == "none" or self.draws.count % 2 == 0) and sweep(
                self.values, self.draws, self.cfg, self.progress, deadline):
            return True
        walk.origin = self.values.snapshot()
        return False

    def finish(self, success: bool, culprit: str | None, iterations: int, initially_finite: bool,
               failure: str | None = None) -> SearchResult:
        inputs = self.values.finish(success, initially_finite)
        if iterations == 0 and initially_finite:
            method = "none"
        elif self.draws.count or self.draws.replaced_nonfinite:
            method = "sampling"
        elif self.descent.steps:
            method = "gradient"
        else:
            method = "none"
        state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return SearchResult(
            success=success,
            inputs=inputs,
            state_dict=state,
            iterations=iterations,
            elapsed_ms=(time.perf_counter() - self.start) * 1000.0,
            culprit=culprit,
            initially_finite=initially_finite,
            method=method,
            failure=None if success else failure,
        )

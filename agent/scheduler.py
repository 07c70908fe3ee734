"""The campaign's scheduler: Thompson sampling over arms (seed source × category × target).

An arm is what to try next: a seed source (`generator`, `history`), what to do with the seed
(`seed`: run it as it is, or a root-cause category of TAXONOMY.md / `stateful`: mutate it with a
mutator aimed at that category) and the target to judge it on. Each arm has a Beta(α, β) belief
about "the next test from this arm shows new behaviour"; each pick draws one sample per arm
and takes the largest (Thompson sampling), so arms that paid off recently get most tests while
every arm keeps a chance.

Reward (1 or 0 per test), "new behaviour" meaning any of:
- a bug verdict whose signature (`triage.signature.signature_of`: symptom, target, rung and a
  normalised crash location or the program's canonical form) was not seen before;
- a graph-break or recompile reason (normalised) not seen before on a torch.compile target:
  the oracle reports what Dynamo recorded over each test's state-retained compiled runs
  (`CaseResult.dynamo`, oracle/dynamo_record.py);
- compiler lines covered for the first time, when coverage is on.
Passing and invalid verdicts earn nothing on their own: an arm is not paid for making programs
that the reference rejects in new ways.

Priors: α0 = 1 + PRIOR_WEIGHT × share of the category in the compiler's bug history (from
`history_seeds.category_prior` when history seeds are used), β0 = 1. Bug finding is not
stationary (a found bug stops being new), so each update first shrinks the arm's evidence by
DISCOUNT: an arm's memory is about its last 1/(1-DISCOUNT) pulls.

Value bins (oracle/value_bins.py: all-positive values, ties, constants, ...) are a second,
independent bandit with the same reward: each test draws its arm and then its value bin, so the
campaign learns which kinds of values find new behaviour without multiplying the arms.

`--mutant-share` splits the workers' time between plain seeds and mutants before the bandit picks
among the arms of that kind, so the mix is a setting, not something the bandit can drift away from.
It is a share of worker seconds, not of tests: a mutant costs two to four plain programs (its calls
recompile, and stateful cases compare three ways), and a seed test's cost moves with the pack size
and backward share, so a share of tests would silently hand mutants' time to seeds whenever seed
tests got heavier (at pack 4 the mutants' share fell from 58% to 39% of test time). The split is
kept by deficit: the next test is a mutant when the mutants' share of the time so far (tests made,
each at its kind's mean cost of the tests judged) is below the setting. Until both kinds have a
measured cost they are assumed to cost the same.

The state (every arm's α, β, pulls, rewards, and the behaviours seen) is JSON, saved in the
store's meta table and restored on resume; `summary()` is what the status panel and the
report show.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterable

SEED = "seed"  # the "category" of an arm that runs seeds unmutated
MUTANT = "mutant"  # the kind of every other arm's tests (for the time split)
MAX_MISSES = 5  # mutants that could not be made in a row before the split falls back to chance
PRIOR_WEIGHT = 4.0
DISCOUNT = 0.99


@dataclass(frozen=True)
class Arm:
    source: str
    category: str  # SEED or a mutator category
    target: str

    @property
    def key(self) -> str:
        return f"{self.source}|{self.category}|{self.target}"

    @property
    def mutates(self) -> bool:
        return self.category != SEED

    @classmethod
    def from_key(cls, key: str) -> "Arm":
        source, category, target = key.split("|", 2)
        return cls(source, category, target)


@dataclass
class ArmState:
    alpha0: float
    beta0: float = 1.0
    alpha: float = 0.0  # evidence on top of the prior (discounted)
    beta: float = 0.0
    pulls: int = 0
    rewards: int = 0

    def sample(self, rng: random.Random) -> float:
        return rng.betavariate(self.alpha0 + self.alpha, self.beta0 + self.beta)

    @property
    def mean(self) -> float:
        a, b = self.alpha0 + self.alpha, self.beta0 + self.beta
        return a / (a + b)

    def update(self, reward: float, discount: float) -> None:
        self.alpha = self.alpha * discount + reward
        self.beta = self.beta * discount + (1.0 - reward)
        self.pulls += 1
        self.rewards += int(reward > 0)


class Scheduler:
    """Thompson sampling over `arms`; `pick` chooses, `reward` learns, `to_json` persists."""

    def __init__(self, sources: Iterable[str], categories: Iterable[str], targets: Iterable[str], *,
                 prior: dict[str, float] | None = None, mutant_share: float = 0.5, seed: int = 0,
                 discount: float = DISCOUNT, categories_for: Callable[[str], Iterable[str]] | None = None,
                 value_bins: Iterable[str] = ()):
        self.sources = list(sources)
        self.categories = list(categories)
        self.targets = list(targets)
        self.mutant_share = float(mutant_share)
        self.discount = discount
        self.prior = dict(prior or {})
        self.rng = random.Random(seed)
        self.arms: dict[str, ArmState] = {}
        for s in self.sources:
            for t in self.targets:
                self.arms[Arm(s, SEED, t).key] = ArmState(alpha0=1.0)
                allowed = set(categories_for(t)) if categories_for is not None else set(self.categories)
                for c in (c for c in self.categories if c in allowed):
                    self.arms[Arm(s, c, t).key] = ArmState(alpha0=1.0 + PRIOR_WEIGHT * self.prior.get(c, 0.0))
        self.bins: dict[str, ArmState] = {b: ArmState(alpha0=1.0) for b in value_bins}
        self.seen: set[str] = set()  # behaviours seen: signature digests, "gb:<reason>", ...
        self.covered_lines = 0
        # per kind ("seed", "mutant"): [tests made, tests judged, worker seconds of those judged]
        self.cost: dict[str, list[float]] = {SEED: [0, 0, 0.0], MUTANT: [0, 0, 0.0]}
        self._misses = 0  # mutants asked for in a row that no mutator could make

    # -- choosing -----------------------------------------------------------------------------------
    def pick(self, *, mutate: bool | None = None, exclude: Iterable[str] = ()) -> Arm:
        """The next arm. `mutate` None: whichever kind keeps the worker time at `mutant_share`."""
        if mutate is None:
            mutate = self.mutant_next()
        banned = set(exclude)
        keys = [k for k in self.arms if (Arm.from_key(k).mutates == mutate) and k not in banned]
        if not keys:
            keys = [k for k in self.arms if k not in banned] or list(self.arms)
        best = max(keys, key=lambda k: self.arms[k].sample(self.rng))
        return Arm.from_key(best)

    def mutant_next(self) -> bool:
        """Whether the next test should be a mutant, to keep the mutants' share of worker time."""
        if not self.categories or self.mutant_share <= 0.0:
            return False
        if self.mutant_share >= 1.0:
            return True
        seed_s, mutant_s = self.spent_s()
        if self._misses >= MAX_MISSES or seed_s + mutant_s <= 0.0:
            # mutants cannot be made now, or nothing is spent yet: the share is kept by chance alone
            return self.rng.random() < self.mutant_share
        return mutant_s / (seed_s + mutant_s) < self.mutant_share

    def spent_s(self) -> tuple[float, float]:
        """(seed, mutant) worker seconds so far, estimated: the tests made of each kind (in flight
        too) times the mean cost of that kind's judged tests (the other kind's, or 1 s, until known)."""
        means = {k: (c[2] / c[1] if c[1] else None) for k, c in self.cost.items()}
        known = [m for m in means.values() if m is not None]
        fallback = sum(known) / len(known) if known else 1.0

        def spent(kind: str) -> float:
            mean = means[kind]
            return self.cost[kind][0] * (fallback if mean is None else mean)
        return spent(SEED), spent(MUTANT)

    def made(self, arm: Arm) -> None:
        """A test of `arm` was made (it counts toward its kind's time from now on)."""
        self.cost[_kind(arm)][0] += 1
        if arm.mutates:
            self._misses = 0

    def missed(self, arm: Arm) -> None:
        """A mutant of `arm` was asked for and none could be made."""
        if arm.mutates:
            self._misses += 1

    def timed(self, arm: Arm, seconds: float) -> None:
        """A test of `arm` was judged in `seconds` of worker time."""
        c = self.cost[_kind(arm)]
        c[1] += 1
        c[2] += max(float(seconds), 0.0)

    def pick_bin(self) -> str | None:
        """The value bin of the next test (None when the campaign draws values one way only)."""
        if not self.bins:
            return None
        return max(self.bins, key=lambda b: self.bins[b].sample(self.rng))

    # -- learning -----------------------------------------------------------------------------------
    def novel(self, behaviours: Iterable[str]) -> list[str]:
        """Which of `behaviours` are new; they are remembered as seen."""
        new = [b for b in behaviours if b not in self.seen]
        self.seen.update(new)
        return new

    def reward(self, arm: Arm, reward: float) -> None:
        state = self.arms.get(arm.key)
        if state is None:  # an arm from an older configuration (resume with other targets)
            state = self.arms[arm.key] = ArmState(alpha0=1.0)
        state.update(reward, self.discount)

    def credit(self, arm: Arm, reward: float = 1.0) -> None:
        """A reward that arrives after the arm's test was judged (triage made a new cluster of its
        finding): evidence for the arm, not another pull."""
        state = self.arms.get(arm.key)
        if state is None:
            state = self.arms[arm.key] = ArmState(alpha0=1.0)
        state.alpha += reward
        state.rewards += int(reward > 0)

    def reward_bin(self, name: str | None, reward: float) -> None:
        if name is None:
            return
        state = self.bins.get(name)
        if state is None:  # a bin from an older configuration
            state = self.bins[name] = ArmState(alpha0=1.0)
        state.update(reward, self.discount)

    # -- persistence and reporting --------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"policy": "thompson-beta", "discount": self.discount, "mutant_share": self.mutant_share,
                "cost": {k: [int(c[0]), int(c[1]), round(c[2], 3)] for k, c in self.cost.items()},
                "prior": self.prior, "covered_lines": self.covered_lines, "seen": sorted(self.seen),
                "rng": _rng_state(self.rng),
                "arms": {k: [s.alpha0, s.beta0, s.alpha, s.beta, s.pulls, s.rewards] for k, s in self.arms.items()},
                "bins": {k: [s.alpha0, s.beta0, s.alpha, s.beta, s.pulls, s.rewards] for k, s in self.bins.items()}}

    def restore(self, data: dict[str, Any]) -> None:
        """Take over the pulls, evidence and seen behaviours of a saved state (priors stay as configured)."""
        for key, vals in (data.get("arms") or {}).items():
            _a0, _b0, alpha, beta, pulls, rewards = vals
            state = self.arms.get(key) or ArmState(alpha0=float(_a0), beta0=float(_b0))
            state.alpha, state.beta, state.pulls, state.rewards = float(alpha), float(beta), int(pulls), int(rewards)
            self.arms[key] = state
        for key, vals in (data.get("bins") or {}).items():
            if key in self.bins:  # bins switched off on resume stay off
                _a0, _b0, alpha, beta, pulls, rewards = vals
                state = self.bins[key]
                state.alpha, state.beta, state.pulls, state.rewards = float(alpha), float(beta), int(pulls), int(rewards)
        for kind, vals in (data.get("cost") or {}).items():
            if kind in self.cost and isinstance(vals, list) and len(vals) == 3:
                self.cost[kind] = [int(vals[0]), int(vals[1]), float(vals[2])]
        self.seen = set(data.get("seen") or ())
        self.covered_lines = int(data.get("covered_lines") or 0)
        if data.get("rng") is not None:
            try:
                self.rng.setstate(_rng_from_json(data["rng"]))
            except (TypeError, ValueError):
                pass

    def summary(self, top: int = 8) -> list[dict[str, Any]]:
        """The `top` arms: pulled ones by posterior mean (best first), then unpulled ones."""
        rows = [{"arm": k, "pulls": s.pulls, "rewards": s.rewards, "mean": round(s.mean, 4),
                 "alpha": round(s.alpha0 + s.alpha, 3), "beta": round(s.beta0 + s.beta, 3)}
                for k, s in self.arms.items()]
        rows.sort(key=lambda r: (r["pulls"] == 0, -r["mean"], -r["pulls"], r["arm"]))
        return rows[:top]


def _kind(arm: Arm) -> str:
    return MUTANT if arm.mutates else SEED


def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _rng_from_json(data: list[Any]) -> tuple[Any, ...]:
    version, internal, gauss = data
    return (version, tuple(internal), gauss)


def dumps(scheduler: Scheduler) -> str:
    return json.dumps(scheduler.to_json(), sort_keys=True)

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

`--mutate-prob` splits tests between plain seeds and mutants before the bandit picks among the
arms of that kind, so the share of mutants is a setting, not something the bandit can drift away from.

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
                 prior: dict[str, float] | None = None, mutate_prob: float = 0.5, seed: int = 0,
                 discount: float = DISCOUNT, categories_for: Callable[[str], Iterable[str]] | None = None,
                 value_bins: Iterable[str] = ()):
        self.sources = list(sources)
        self.categories = list(categories)
        self.targets = list(targets)
        self.mutate_prob = float(mutate_prob)
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

    # -- choosing -----------------------------------------------------------------------------------
    def pick(self, *, mutate: bool | None = None, exclude: Iterable[str] = ()) -> Arm:
        """The next arm. `mutate` None: a mutant with probability `mutate_prob`."""
        if mutate is None:
            mutate = bool(self.categories) and self.rng.random() < self.mutate_prob
        banned = set(exclude)
        keys = [k for k in self.arms if (Arm.from_key(k).mutates == mutate) and k not in banned]
        if not keys:
            keys = [k for k in self.arms if k not in banned] or list(self.arms)
        best = max(keys, key=lambda k: self.arms[k].sample(self.rng))
        return Arm.from_key(best)

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

    def reward_bin(self, name: str | None, reward: float) -> None:
        if name is None:
            return
        state = self.bins.get(name)
        if state is None:  # a bin from an older configuration
            state = self.bins[name] = ArmState(alpha0=1.0)
        state.update(reward, self.discount)

    # -- persistence and reporting --------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"policy": "thompson-beta", "discount": self.discount, "mutate_prob": self.mutate_prob,
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


def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _rng_from_json(data: list[Any]) -> tuple[Any, ...]:
    version, internal, gauss = data
    return (version, tuple(internal), gauss)


def dumps(scheduler: Scheduler) -> str:
    return json.dumps(scheduler.to_json(), sort_keys=True)

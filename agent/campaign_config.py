"""A campaign's configuration: what `nnforge campaign` was asked for, as the store keeps it.

`CampaignConfig` is stored in the campaign's folder at the start and read back by `--resume`;
`parse_budget` reads the budget a person types; the target helpers say which targets run
exported ONNX graphs, and which mutator categories test each kind of target.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from nnforge.core.limits import VALUE_SEARCH_BUDGET_MS


class CampaignSetupError(RuntimeError):
    """The campaign cannot start (folder, disk, configuration); the message says why. Exit 2."""


# -- configuration --------------------------------------------------------------------------------------------
_BUDGET_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([hms]?)")


def parse_budget(text: str) -> float:
    """"60s", "10m", "8h", "1h30m" → seconds; a bare number ("90") is seconds, as --help says. A
    number without a unit after one with ("1h30") is refused: a person means 1h30m by it, and
    reading it as 1h00m30s would quietly cut the campaign by half an hour."""
    s = text.strip().lower().replace(" ", "")
    if not s:
        raise ValueError("empty budget")
    pos, total = 0, 0.0
    for m in _BUDGET_PART.finditer(s):
        if m.start() != pos or (not m.group(2) and m.start() > 0):
            break
        total += float(m.group(1)) * {"h": 3600, "m": 60, "s": 1, "": 1}[m.group(2)]
        pos = m.end()
    if pos != len(s) or total <= 0:
        raise ValueError(f"cannot read budget {text!r}: use e.g. 60s, 10m, 8h or 1h30m "
                         f"(a bare number alone is seconds)")
    return total


@dataclass(frozen=True)
class CampaignConfig:
    out: str
    budget_s: float
    targets: tuple[str, ...] = ("inductor", "ort", "tvm")
    workers: int = 2
    llm: str = "none"
    seeds: tuple[str, ...] = ("generator",)  # "generator", "history:DIR"
    mutant_share: float = 0.5  # of the workers' test time (agent/scheduler.py)
    nodes: int = 8
    seed: int = 0  # first generator seed and the scheduler's random seed
    triage: bool = True
    triage_budget_s: float = 60.0  # per finding's reduction
    triage_max_queries: int = 60
    triage_per_key: int = 2  # findings of one provisional key reduced; the rest attach
    triage_workers: int = 1  # triage threads: each holds at most one of the shared workers at a time
    triage_max_workers: int = 0  # workers triage may take while findings wait (0: all of them)
    triage_reserve_s: float = 0.0  # end of the budget kept for triage while findings wait for a reduction
    triage_after_s: float = 0.0  # past the budget, for findings recorded as it ended (agent/campaign.py)
    executor: str = "local"
    address: str | None = None
    coverage: bool = False  # measure torch's compiler packages in the workers (slower tests)
    timeout_s: float = 60.0
    memory_mb: int = 6000
    value_search_budget_ms: float = VALUE_SEARCH_BUDGET_MS
    value_bins: bool = True  # each test's values from a bin the scheduler picks (oracle/value_bins.py)
    backward_share: float = 0.2  # torch.compile tests whose calls also run a backward (core/backward.py)
    pack: int = 2  # generator programs per torch.compile seed test (generator/pack.py; core/settings.py)
    pack_mutants: int = 1  # single-call mutants per torch.compile mutant test (mutators/pack.py)
    gate_check: bool = True  # ort/tvm programs pass the export gate on the probe worker first (agent/export_gate.py)
    min_free_mb: int = 200
    stats_every_s: float = 10.0
    report_every_s: float = 300.0
    drain_s: float = 15.0  # at the end of the budget, how long tests in flight may finish

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["targets"], d["seeds"] = list(self.targets), list(self.seeds)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CampaignConfig":
        known = {f for f in cls.__dataclass_fields__}
        if "mutate_prob" in d and "mutant_share" not in d:  # a campaign started before the split was by time
            d["mutant_share"] = d["mutate_prob"]
        d = {k: v for k, v in d.items() if k in known}
        d["targets"], d["seeds"] = tuple(d.get("targets", ())), tuple(d.get("seeds", ()))
        return cls(**d)


def is_onnx_target(target: str) -> bool:
    """The target runs an exported ONNX graph (ort, tvm, onnx_export), not the Python model."""
    from nnforge.oracle.backend import parse_target

    return parse_target(target).spec.family == "onnx"


def categories_for_target(target: str) -> tuple[str, ...]:
    """The root-cause categories whose mutants test `target`. The frontend families (A-H) and
    invocation sequences aim at graph capture and cached compiled state, which only torch.compile
    has: for ONNX targets they would test the exporter's tracing, in front of the runtime, so
    those targets get the backend families (layout, dtypes, fusion, shapes, special values) only."""
    from nnforge.mutators.base import BACKEND_CATEGORIES, CATEGORIES

    return BACKEND_CATEGORIES if is_onnx_target(target) else CATEGORIES

"""CaseResult: what judging one case returns, in the one form every stage shares.

The oracle makes it, the campaign's executors (local workers, Ray actors) carry it across
processes and machines, triage and the reports read it. `to_wire` / `from_wire` is the form
that crosses a boundary: JSON-able data plus the chosen values as `core/wire.py` bytes (never a
pickle), so a result can come from a machine that ran untrusted code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom, Verdict, worst


@dataclass(frozen=True)
class CaseResult:
    """The verdicts for one case, and the case itself with the values they were judged on."""

    case: TestCase  # with inputs/state_dict as chosen by value search (or as given)
    verdicts: tuple[Verdict, ...]
    search: dict[str, Any] | None = None  # value search's report, None when values were given
    reference: dict[str, Any] | None = None
    values_chosen: bool = False  # value search chose the values during this check
    invalid_reason: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    coverage: dict[str, list[int]] | None = None  # compiler lines new to the workers (Oracle(coverage=True))
    # {target: {"graph_breaks": [reason, ...], "recompiles": [reason, ...]}}: what Dynamo recorded while
    # the target's compiled runs (state retained) ran; torch.compile targets only (oracle/dynamo_record.py)
    dynamo: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    @property
    def symptom(self) -> Symptom:
        return worst(list(self.verdicts))

    @property
    def is_bug(self) -> bool:
        return self.symptom.is_bug

    def to_json(self) -> dict[str, Any]:
        return {"case_id": self.case.case_id, "symptom": self.symptom.value,
                "verdicts": [v.to_json() for v in self.verdicts], "search": self.search,
                "reference": self.reference, "values_chosen": self.values_chosen,
                "invalid_reason": self.invalid_reason, "timings": dict(self.timings),
                "dynamo": {t: dict(d) for t, d in self.dynamo.items()}}

    def graph_breaks(self, target: str) -> list[str]:
        """Dynamo's graph-break reasons on `target` (empty when none, or not a torch.compile target)."""
        return list((self.dynamo.get(target) or {}).get("graph_breaks") or ())

    def recompiles(self, target: str) -> list[str]:
        """The guard failures that made Dynamo recompile on `target` over the call sequence."""
        return list((self.dynamo.get(target) or {}).get("recompiles") or ())

    def to_wire(self) -> dict[str, Any]:
        """Everything, values included, as data that crosses processes and machines."""
        from nnforge.core import wire

        case = self.case
        return {"result": self.to_json(), "coverage": self.coverage,
                "inputs": None if case.inputs is None else wire.encode(tuple(case.inputs)),
                "state": None if case.state_dict is None else wire.encode(dict(case.state_dict))}

    @classmethod
    def from_wire(cls, case: TestCase, data: dict[str, Any]) -> "CaseResult":
        """The result of judging `case` (the values travel in `data`; the program is `case`'s)."""
        from nnforge.core import wire

        r = data["result"]
        inputs = wire.decode(data["inputs"]) if data.get("inputs") is not None else None
        state = wire.decode(data["state"]) if data.get("state") is not None else None
        judged = case.with_(inputs=None if inputs is None else tuple(inputs),
                            state_dict=None if state is None else dict(state))
        return cls(case=judged, verdicts=tuple(Verdict.from_json(v) for v in r["verdicts"]), search=r.get("search"),
                   reference=r.get("reference"), values_chosen=bool(r.get("values_chosen")),
                   invalid_reason=r.get("invalid_reason"), timings=dict(r.get("timings") or {}),
                   coverage=data.get("coverage"), dynamo=dict(r.get("dynamo") or {}))

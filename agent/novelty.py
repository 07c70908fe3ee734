"""What counts as new in a test: the behaviours the scheduler rewards.

A test is rewarded when it shows something no earlier test of the campaign showed: a bug's
provisional root-cause key (not the program that carried it), or a reason Dynamo gave for a
graph break or a recompile, normalised so that numbers and names do not make every reason new.
"""

from __future__ import annotations

import re
from typing import Any

from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Verdict


def behaviours_of(result: Any, case: TestCase) -> list[str]:
    """Everything about a test that the scheduler rewards when it is new (see scheduler.py).

    A bug counts by its provisional root-cause key, not by the program that carried it: the same
    root cause in a new program earns its arm nothing."""
    out = []
    for v in result.verdicts:
        if v.is_bug:
            out.append("bug:" + root_cause_key(v, case))
        for reason in _compiler_notes(v, result):
            out.append(reason)
    return out


def root_cause_key(v: Verdict, case: TestCase) -> str:
    """The finding's provisional key (triage/rootcause.py); a coarse one if the program is unreadable."""
    from nnforge.triage.rootcause import provisional_key

    try:
        return provisional_key(v, case)
    except Exception:
        return "|".join(str(x) for x in (v.target, v.symptom.value, v.rung, v.exc_type))


def _compiler_notes(v: Verdict, result: Any) -> list[str]:
    """Dynamo's graph-break (`gb:`) and recompile (`rc:`) reasons on the verdict's target, normalised
    (numbers, names), from `CaseResult.dynamo` (torch.compile targets; oracle/dynamo_record.py)."""
    record = compiler_record(result, v.target) or {"graph_breaks": [], "recompiles": []}
    return ([f"gb:{_normalise(r)}" for r in record["graph_breaks"]]
            + [f"rc:{_normalise(r)}" for r in record["recompiles"]])


def compiler_record(result: Any, target: str) -> dict[str, list[str]] | None:
    """{"graph_breaks": [...], "recompiles": [...]} Dynamo recorded for `target`; None when it recorded
    nothing (not a torch.compile target, an invalid case, a dead worker)."""
    d = (getattr(result, "dynamo", None) or {}).get(target)
    if d is None:
        return None
    return {"graph_breaks": [str(x) for x in d.get("graph_breaks") or ()],
            "recompiles": [str(x) for x in d.get("recompiles") or ()]}


def _normalise(text: str) -> str:
    try:
        from nnforge.triage.normalize import normalize_message

        return normalize_message(text)[:200]
    except Exception:
        return re.sub(r"\d+", "N", text)[:200]

"""What TorchDynamo recorded while one test ran: its graph-break reasons and its recompile reasons.

Why the oracle reports them: a campaign rewards new behaviour, and a graph break or a recompile
for a reason never seen before is new compiler behaviour even when the verdict is a pass (the
scheduler's `gb:` / `rc:` behaviours, agent/campaign.py). The report also lists the most common ones.

Where they come from (torch 2.13, checked on CPU):
- graph breaks: the keys of `torch._dynamo.utils.counters["graph_break"]` (e.g. a `print`) and
  of `counters["unimplemented"]` (where 2.13 files data-dependent branching and other constructs
  Dynamo gave up on). Each key is Dynamo's multi-line explanation; we keep its first line and the
  first sentence of its `Explanation:`.
- recompiles: `recompile_reason` of the compilation metrics Dynamo records per frame compile
  (`torch._dynamo.utils.get_compilation_metrics()`), e.g. "tensor 'x' size mismatch at index 0.
  expected 3, actual 5"; the compile-id prefix ("0/1: ") is dropped.

Both stores are process-global, so `DynamoRecorder` clears them when it starts: a record is one
test's (one run's), never a worker's history. Clearing and reading cost microseconds.

mutators/reach.py (`measure_compile`) reads the same counter for its benchmark with its own
code; mutators may not import the oracle, so the two are kept apart on purpose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_REASON_CHARS = 160
MAX_REASONS = 20  # per kind and test: a pathological program must not bloat every record
_COMPILE_ID = re.compile(r"^\s*\[?[\d/!]+\]?:\s*")  # "0/1: " or "[0/1]: " before a guard failure
_BREAK_COUNTERS = ("graph_break", "unimplemented")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")  # not after "e.g." before a code span
_GUARD_COMMENT = re.compile(r"\s+#\s.*$")  # "x == 0  # x += 1  # program.py:12 in forward": the guard alone


@dataclass(frozen=True)
class DynamoRecord:
    """Distinct graph-break and recompile reasons (short strings, first seen first) of one run."""

    graph_breaks: tuple[str, ...] = ()
    recompiles: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.graph_breaks or self.recompiles)

    def merged(self, other: "DynamoRecord") -> "DynamoRecord":
        """Both records' reasons, without repeats (e.g. over the rungs of one target's ladder)."""
        return DynamoRecord(_distinct(self.graph_breaks + other.graph_breaks),
                            _distinct(self.recompiles + other.recompiles))

    def to_json(self) -> dict[str, list[str]]:
        return {"graph_breaks": list(self.graph_breaks), "recompiles": list(self.recompiles)}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> "DynamoRecord":
        d = d or {}
        return cls(tuple(str(x) for x in d.get("graph_breaks") or ()), tuple(str(x) for x in d.get("recompiles") or ()))


def graph_break_reason(text: str) -> str:
    """Dynamo's explanation of a graph break, as one short line: the headline and the first
    sentence of its `Explanation:` (the headline alone, e.g. "Failed to trace builtin operator",
    does not say which operator)."""
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    head = lines[0]
    why = next((ln[len("Explanation:"):].strip() for ln in lines[1:] if ln.startswith("Explanation:")), "")
    why = _SENTENCE_END.split(why, maxsplit=1)[0].rstrip(".") if why else ""
    return (f"{head}: {why}" if why and why not in head else head)[:MAX_REASON_CHARS]


def recompile_reason(text: str) -> str:
    """A guard failure behind a recompile, as one short line: the failing guard, without the compile
    id and without the user source line and file Dynamo appends after `#`."""
    first = (str(text).strip().splitlines() or [""])[0]
    return _GUARD_COMMENT.sub("", _COMPILE_ID.sub("", first)).strip()[:MAX_REASON_CHARS]


class DynamoRecorder:
    """`with DynamoRecorder() as rec: run()` then `rec.record`: what Dynamo recorded in between.

    Starting clears Dynamo's global counters and compilation metrics (so the record is this run's
    alone); leaving reads them, also when the run raised (the breaks before a crash are news too).
    """

    def __init__(self) -> None:
        self.record = DynamoRecord()

    def __enter__(self) -> "DynamoRecorder":
        clear_dynamo_records()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.record = read_dynamo_records()
        except Exception:  # a torch without these internals: no record, never a failed test
            self.record = DynamoRecord()


def clear_dynamo_records() -> None:
    from torch._dynamo import utils

    utils.counters.clear()
    clear = getattr(utils, "clear_compilation_metrics", None)
    if clear is not None:
        clear()


def read_dynamo_records() -> DynamoRecord:
    """The graph-break and recompile reasons recorded since the last `clear_dynamo_records()`."""
    from torch._dynamo import utils

    breaks = [graph_break_reason(k) for name in _BREAK_COUNTERS for k in utils.counters.get(name, {})]
    recompiles = []
    get_metrics = getattr(utils, "get_compilation_metrics", None)
    for m in (get_metrics() if get_metrics is not None else ()):
        reason = getattr(m, "recompile_reason", None)
        if reason:
            recompiles.append(recompile_reason(reason))
    return DynamoRecord(_distinct(breaks), _distinct(recompiles))


def _distinct(items: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(x for x in items if x))[:MAX_REASONS]


__all__ = ["DynamoRecord", "DynamoRecorder", "clear_dynamo_records", "graph_break_reason", "read_dynamo_records",
           "recompile_reason"]

"""Programs headed for `ort` or `tvm` pass the ONNX export gate before they become tests.

The export table (agent/export_probe.py) keeps generation off operator instances the path
refuses on their own, but a quarter of the programs still stopped at the gate: what operators do
together (an int intermediate feeding an operator that takes none once exported), attribute forms
the probe keys do not tell apart (a permute spelt with negative dims), and mutants whose rewrite
sits on top of either. Such a test costs a worker slot and never reaches the runtime. So the
campaign asks the probe worker (its own sandboxed worker, beside the test workers) to take the
gate's own steps on each such program first (oracle/export_probe.gate_check), and draws or
mutates again where the gate refuses.

Only a refusal counts. A worker that died or timed out, or a disagreement in NaN/Inf alone (the
test's value search keeps them out), admits the program: the test judges it, so the check
never hides more than the gate itself would have stopped.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from nnforge.core.testcase import TestCase

GATE_TIMEOUT_S = 20.0  # an export and an onnx.reference run of one program, with its eager reference


def export_is_gate(target: str) -> bool:
    """The target's ladder starts with the ONNX export as a gate (ort, tvm), not as what is tested
    (onnx_export, whose refusals are its findings)."""
    from nnforge.oracle.backend import parse_target

    return bool(parse_target(target).spec.gate_rungs)


@dataclass
class GateCheck:
    """`check(case)`: does `case` pass the export gate? Asked through `call` (a WorkerPool's)."""

    call: Callable[..., Any]
    timeout_s: float = GATE_TIMEOUT_S
    checked: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # the refusal's first words -> programs
    seconds: float = 0.0

    def __call__(self, case: TestCase) -> bool:
        from nnforge.oracle.export_probe import GATE_CHECK_FN

        payload = {"program": case.program, "calls": [c.to_json() for c in case.calls], "seed": 0}
        out = self.call(GATE_CHECK_FN, payload, timeout_s=self.timeout_s)
        self.checked += 1
        value = out.value if out.ok else None
        if not isinstance(value, dict):
            return True  # the worker proves nothing about the gate: the test will tell
        self.seconds += float(value.get("elapsed_s") or 0.0)
        if value.get("ok", True):
            return True
        self.refused[_reason_head(str(value.get("reason") or ""))] += 1
        return False

    def line(self) -> str:
        """For summary.md: how many programs the check turned away, and the commonest reasons."""
        n = sum(self.refused.values())
        top = "; ".join(f"{k} ({v})" for k, v in self.refused.most_common(3))
        return (f"export gate checked before the test: {self.checked} programs, {n} refused and drawn or "
                f"mutated again ({self.seconds:.0f} s on the probe worker)" + (f"; most often: {top}" if top else ""))


def _reason_head(reason: str) -> str:
    """The refusal without its numbers, shapes and module paths, short enough to count: the
    exception's own name, and the ONNX operator where the checker names one
    (`InferenceError on Transpose`)."""
    import re

    head = reason.split(" (", 1)[-1] if reason.startswith("onnx_export:") else reason
    ops = re.findall(r"op_type:(\w+)", head)
    exc = re.match(r"[\w.]*?(\w+(Error|Exception|Failed)):", head)
    if ops and exc:
        return f"{exc.group(1)} on {ops[0]}"
    head = re.sub(r"\{[^}]*\}|\([^)]*\)|\d+(\.\d+)?(e-?\d+)?", "…", head)
    return head.rstrip(")")[:90]

"""Verdicts: what the oracle concluded about one TestCase on one target, as plain data."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Symptom(str, Enum):
    PASS = "pass"
    CRASH = "crash"  # exception in compile or run of the system under test
    SEGFAULT = "segfault"  # the worker died on a signal (abort, segfault)
    TIMEOUT = "timeout"
    OOM = "oom"
    MISMATCH = "mismatch"  # silent wrong output
    NAN_MISMATCH = "nan_mismatch"  # non-finite values where the reference has none, or vice versa
    EXCEPTION_MISMATCH = "exception_mismatch"  # one side raises, the other does not
    INVALID = "invalid"  # the reference itself fails: not a bug, counted apart

    @property
    def is_bug(self) -> bool:
        return self not in (Symptom.PASS, Symptom.INVALID)


# The symptoms that are bugs, as the text the store and the reports hold.
BUG_SYMPTOMS: tuple[str, ...] = tuple(s.value for s in Symptom if s.is_bug)


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    """The outcome for one target (e.g. `inductor`, `ort`, `tvm`) of one TestCase.

    `rung` names the guilty layer found by the blame ladder (e.g. `dynamo`, `aot_autograd`,
    `inductor`, `ort_optimizer`, `tvm_pipeline`), or None when nothing is wrong.
    """

    target: str
    symptom: Symptom
    rung: str | None = None
    call_index: int | None = None  # which call of the invocation sequence showed it
    output_index: int | None = None  # which output disagreed
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    fp64_rmse_actual: float | None = None  # RMSE of the target's output against the float64 run
    fp64_rmse_eager: float | None = None  # RMSE of eager against the float64 run
    exc_type: str | None = None
    exc_message: str | None = None
    frames: tuple[Frame, ...] = ()
    stateful: bool = False  # state-retained and reset-per-call compiled runs disagree
    # the wrong value is a write to Python state the compiled run lost or changed (core/python_state.py):
    # "module attribute (int)", "global (container)"; None for outputs, inputs and tensors of the state dict
    side_effect: str | None = None
    # the value bin whose property the test's values had ("positive", "ties", ...; "normal" when
    # value search had to leave the bin it drew from; oracle/value_bins.py); None when unrecorded
    value_bin: str | None = None
    # the wrong value is a gradient of a backward call (core/backward.py): "input 0", "param lin.weight"
    gradient: str | None = None
    # where a wrong value first appears (oracle/locate.py): {"name", "line", "dtype", "shape",
    # "operands", "symptom"} of the first statement the guilty rung computes wrong; None when unlocated
    first_wrong: dict[str, Any] | None = None
    detail: str = ""  # one human sentence
    timings: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def is_bug(self) -> bool:
        return self.symptom.is_bug

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["symptom"] = self.symptom.value
        d["frames"] = [f.to_json() for f in self.frames]
        return d

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Verdict":
        d = dict(d)
        d["symptom"] = Symptom(d["symptom"])
        d["frames"] = tuple(Frame(**f) for f in d.get("frames", ()))
        return cls(**d)


def worst(verdicts: list[Verdict]) -> Symptom:
    """The symptom that decides a case's exit status: any bug beats invalid beats pass."""
    for v in verdicts:
        if v.is_bug:
            return v.symptom
    if any(v.symptom is Symptom.INVALID for v in verdicts):
        return Symptom.INVALID
    return Symptom.PASS

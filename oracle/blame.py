"""The blame ladder: from the outcomes of a target's rungs, cheapest first, to one Verdict.

Each rung adds one layer on top of the one below (Dynamo capture, AOTAutograd, Inductor; ONNX
export, ORT kernels, ORT optimiser; TVM import, TVM passes), so the first rung that disagrees
with eager names the guilty layer. A skipped rung (e.g. ONNX's reference evaluator cannot run
the graph) judges nothing and is noted in the verdict's detail.

This module is pure logic on plain data; running the rungs is `oracle.job`'s business.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from nnforge.core.verdict import Frame, Symptom, Verdict


@dataclass(frozen=True)
class RungOutcome:
    """What one rung did with the case. `skipped` holds the reason when the rung could not judge."""

    rung: str
    symptom: Symptom = Symptom.PASS
    skipped: str | None = None
    call_index: int | None = None
    output_index: int | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    fp64_rmse_actual: float | None = None
    fp64_rmse_eager: float | None = None
    exc_type: str | None = None
    exc_message: str | None = None
    frames: tuple[Frame, ...] = ()
    stateful: bool = False
    detail: str = ""
    elapsed_s: float = 0.0
    blamed_rung: str | None = None  # when the layer at fault is not this rung (e.g. export)
    side_effect: str | None = None  # a lost write to Python state: "module attribute (int)", "global (container)"
    gradient: str | None = None  # a wrong gradient of a backward call: "input 0", "param lin.weight"

    @property
    def failed(self) -> bool:
        """Disagrees with eager, or cannot run the program at all (unsupported stops the ladder)."""
        return self.skipped is None and self.symptom is not Symptom.PASS

    def summary(self) -> str:
        if self.skipped is not None:
            return f"{self.rung}: skipped ({self.skipped})"
        if self.symptom is Symptom.PASS:  # a pass may carry a note: rounding noise, a shared exception
            return f"{self.rung}: pass" + (f" ({self.detail})" if self.detail else "")
        where = f" at call {self.call_index}" if self.call_index is not None else ""
        return f"{self.rung}: {self.symptom.value}{where}" + (f" ({self.detail})" if self.detail else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "rung": self.rung, "symptom": self.symptom.value, "skipped": self.skipped,
            "call_index": self.call_index, "output_index": self.output_index,
            "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err,
            "fp64_rmse_actual": self.fp64_rmse_actual, "fp64_rmse_eager": self.fp64_rmse_eager,
            "exc_type": self.exc_type, "exc_message": self.exc_message,
            "frames": [f.to_json() for f in self.frames], "stateful": self.stateful,
            "detail": self.detail, "elapsed_s": self.elapsed_s, "blamed_rung": self.blamed_rung,
            "side_effect": self.side_effect, "gradient": self.gradient,
        }


def first_failing(outcomes: list[RungOutcome]) -> RungOutcome | None:
    return next((o for o in outcomes if o.failed), None)


def blame(target: str, outcomes: list[RungOutcome], *, versions: dict[str, str] | None = None,
          extra_timings: dict[str, float] | None = None, gates: tuple[str, ...] = ()) -> Verdict:
    """One Verdict for `target`: the first failing rung's symptom and name, or pass.

    `gates`: rungs in front of the system under test (the ONNX export in front of ORT and TVM).
    One of them failing makes the test invalid for `target`: the program never reached it."""
    timings = dict(extra_timings or {})
    for o in outcomes:
        timings[f"{o.rung}_s"] = round(o.elapsed_s, 4)
    trail = "; ".join(o.summary() for o in outcomes)
    guilty = first_failing(outcomes)
    if guilty is None:
        return Verdict(target=target, symptom=Symptom.PASS, detail=trail, timings=timings, versions=dict(versions or {}))
    if (guilty.blamed_rung or guilty.rung) in gates:
        why = ("not exportable" if guilty.symptom is not Symptom.MISMATCH and guilty.symptom is not Symptom.NAN_MISMATCH
               else "the exported graph disagrees with eager already in onnx.reference (an exporter question)")
        return Verdict(target=target, symptom=Symptom.INVALID, rung=guilty.blamed_rung or guilty.rung,
                       exc_type=guilty.exc_type, exc_message=guilty.exc_message, frames=guilty.frames,
                       detail=f"{why}: {trail}", timings=timings, versions=dict(versions or {}))
    return Verdict(
        target=target,
        symptom=guilty.symptom,
        rung=guilty.blamed_rung or guilty.rung,
        call_index=guilty.call_index,
        output_index=guilty.output_index,
        max_abs_err=guilty.max_abs_err,
        max_rel_err=guilty.max_rel_err,
        fp64_rmse_actual=guilty.fp64_rmse_actual,
        fp64_rmse_eager=guilty.fp64_rmse_eager,
        exc_type=guilty.exc_type,
        exc_message=guilty.exc_message,
        frames=guilty.frames,
        stateful=guilty.stateful,
        side_effect=guilty.side_effect,
        gradient=guilty.gradient,
        detail=trail,
        timings=timings,
        versions=dict(versions or {}),
    )


def blame_death(verdict: Verdict, probes: list[tuple[str, Symptom]]) -> Verdict:
    """Name the rung that killed the worker, from rungs rerun one per worker call, cheapest first.

    `probes`: (rung, symptom seen when that rung alone ran). The first rung that died (or failed
    in any other way, which would have stopped the ladder there) is blamed; if none did, the
    death did not reproduce rung by rung and the last rung (the system under test) is named.
    """
    for rung, symptom in probes:
        if symptom.is_bug:
            return replace(verdict, rung=rung, detail=_join(verdict.detail, f"rerun rung by rung: {rung} {symptom.value}"))
    last = probes[-1][0] if probes else verdict.rung
    return replace(verdict, rung=last, detail=_join(verdict.detail, "did not reproduce rung by rung; blaming the last rung"))


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


__all__ = ["RungOutcome", "blame", "blame_death", "first_failing"]

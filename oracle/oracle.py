"""The parent side of the oracle: a TestCase in, Verdicts out, the program never imported here.

One case costs 1 + len(targets) worker calls:

1. `job.run_case` with no targets: value search (unless the case has values) and the eager and
   float64 reference runs. If the reference fails, every target is `invalid` and we stop.
2. one `job.run_case` per target, with the values from step 1 fixed, rerunning the (cheap)
   reference beside the target's ladder.

Why one call per target: when a worker dies (segfault, timeout, OOM) the parent knows exactly
which target killed it, the targets that already ran keep their results, the next target gets
a fresh worker, and each target gets its own time limit. The price is the reference rerun per
target: milliseconds against the seconds a compiler takes.

A death is blamed on the rung in flight: the job announces each rung on the worker's log before
starting it, and the log's tail comes back with the death. Only when no announcement survived
are the ladder's rungs rerun one per call, cheapest first (the first that dies is guilty); that
costs a worker restart per dying probe, so it is done for segfaults and OOMs, and for timeouts
only when asked (each probe may wait a full timeout).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from nnforge.core.limits import VALUE_SEARCH_BUDGET_MS
from nnforge.core.result import CaseResult
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Frame, Symptom, Verdict
from nnforge.oracle.backend import parse_target
from nnforge.oracle.blame import blame_death
from nnforge.oracle.job import rung_in_flight, top_rung_first

JOB = "nnforge.oracle.job:run_case"
_DEATHS = {"segfault": Symptom.SEGFAULT, "timeout": Symptom.TIMEOUT, "oom": Symptom.OOM}


class Oracle:
    """Judges TestCases on `targets` (e.g. ["inductor", "ort", "tvm"]) using worker `pool`."""

    def __init__(self, pool: Any, targets: list[str], value_search_budget_ms: float = VALUE_SEARCH_BUDGET_MS, *,
                 timeout_s: float | None = None, seed: int = 0, stop_at_first: bool = True,
                 blame_deaths: bool = True, blame_timeouts: bool = False, coverage: bool = False,
                 locate: bool = False):
        for t in targets:
            parse_target(t)  # fail now, in the parent, on a misspelt target
        self.pool = pool
        self.targets = list(targets)
        self.value_search_budget_ms = value_search_budget_ms
        self.timeout_s = timeout_s
        self.seed = seed
        self.stop_at_first = stop_at_first
        self.blame_deaths = blame_deaths
        self.blame_timeouts = blame_timeouts
        self.coverage = coverage  # measure torch's compiler packages in the workers (oracle/coverage_probe.py)
        self.locate = locate  # a wrong value's verdict says where it first went wrong (oracle/locate.py)
        self._spent = threading.local()  # worker seconds of the check in progress, per thread

    # -- public --------------------------------------------------------------------------------
    def check(self, case: TestCase) -> CaseResult:
        from nnforge.oracle.job import dump_values, load_values

        self._spent.s = 0.0
        base = self._payload(case)
        covered: dict[str, set[int]] = {}  # per check, not per Oracle: threads share an Oracle
        if case.inputs is not None:
            base["inputs_pt"] = dump_values(tuple(case.inputs))
        if case.state_dict is not None:
            base["state_pt"] = dump_values(dict(case.state_dict))
        first = self._call(JOB, {**base, "targets": [], "search": case.inputs is None}, timeout_s=self.timeout_s)
        if not first.ok and first.exc_type == "WorkerProtocolError":
            return self._all_invalid(case, f"protocol error: {first.exc_message}")
        if not first.ok:
            reason = f"the reference run failed in the worker: {first.status}: {first.exc_type}: {first.exc_message}"
            return self._all_invalid(case, reason, frames=first.frames)
        res = first.value
        problem = job_reply_problem(res, targets=0)
        if problem is not None:
            return self._all_invalid(case, f"protocol error: {problem}")
        _note_coverage(covered, res)
        if res["status"] == "invalid":
            return self._all_invalid(case, res["reason"], exc_type=res.get("exc_type"),
                                     exc_message=res.get("exc_message"), frames=res.get("frames"),
                                     search=res.get("search"))
        try:
            chosen = case.with_(inputs=tuple(load_values(res["inputs_pt"])), state_dict=dict(load_values(res["state_pt"])))
        except (ValueError, TypeError) as e:  # wire.WireError is a ValueError
            return self._all_invalid(case, f"protocol error: the worker's values do not decode: {e}")
        values = values_record(res.get("values"))
        if values is not None:  # which value bin the chosen values came from, kept with them
            chosen = chosen.with_(meta={**chosen.meta, "values": values})
        fixed = {**base, "inputs_pt": res["inputs_pt"], "state_pt": res["state_pt"], "search": False}
        checked = [self._check_target(fixed, t, covered) for t in self.targets]
        bin_used = value_bin_of(chosen)
        if bin_used is not None:
            checked = [(replace(v, value_bin=bin_used), d) for v, d in checked]
        return CaseResult(case=chosen, verdicts=tuple(v for v, _ in checked), search=res.get("search"),
                          reference=res.get("reference"), values_chosen=case.inputs is None,
                          timings={**res.get("timings", {}), "worker_s": round(self._spent.s, 4)},
                          coverage={k: sorted(v) for k, v in covered.items()} if self.coverage else None,
                          dynamo={t: d for t, (_, d) in zip(self.targets, checked) if d is not None})

    # -- internals ------------------------------------------------------------------------------
    def _call(self, job: str, payload: dict[str, Any], timeout_s: float | None) -> Any:
        """pool.call, its worker seconds added to the check's: a test's cost is what its workers
        spent, not the wall time of its thread, which also waits for a free worker (triage holds one)."""
        out = self.pool.call(job, payload, timeout_s=timeout_s)
        self._spent.s = getattr(self._spent, "s", 0.0) + float(getattr(out, "elapsed_s", 0.0) or 0.0)
        return out

    def _payload(self, case: TestCase) -> dict[str, Any]:
        wanted = case.meta.get("value_bin") if case.inputs is None else None
        return {"program": case.program, "calls": [c.to_json() for c in case.calls], "seed": self.seed,
                "value_bin": wanted if isinstance(wanted, str) else None,
                "value_search_budget_ms": self.value_search_budget_ms, "stop_at_first": self.stop_at_first,
                "coverage": self.coverage, "locate": self.locate}

    def _check_target(self, payload: dict[str, Any], target: str,
                      covered: dict[str, set[int]] | None = None) -> tuple[Verdict, dict[str, list[str]] | None]:
        """The target's verdict and Dynamo's record of its runs (None when there is none: not a
        torch.compile target, or the worker died)."""
        out = self._call(JOB, {**payload, "targets": [target]}, timeout_s=self.timeout_s)
        if out.ok:
            problem = job_reply_problem(out.value, targets=1)
            if problem is None and out.value["status"] == "ok":
                try:
                    verdict = Verdict.from_json(out.value["verdicts"][0])
                except Exception as e:
                    problem = f"its verdict does not parse: {type(e).__name__}: {e}"
            if problem is not None:
                return Verdict(target=target, symptom=Symptom.INVALID, detail=f"protocol error: {problem}"), None
            _note_coverage(covered, out.value)
            if out.value["status"] == "invalid":  # the reference failed this time (flaky program)
                return Verdict(target=target, symptom=Symptom.INVALID, detail=out.value["reason"] or ""), None
            return verdict, (out.value.get("dynamo") or {}).get(target)
        return self._dead_target(payload, target, out), None

    def _dead_target(self, payload: dict[str, Any], target: str, out: Any) -> Verdict:
        verdict = self._death_verdict(target, out)
        in_flight = rung_in_flight(out.output_tail or "", target)
        spec = parse_target(target).spec
        probes = self.blame_deaths and (verdict.symptom is not Symptom.TIMEOUT or self.blame_timeouts)
        if (probes and in_flight is not None and in_flight == spec.rungs[-1]
                and top_rung_first(spec.family, len(spec.rungs))):
            # The top rung runs first, so the rungs below it have not been asked: each runs alone,
            # cheapest first; the first that fails is guilty, else the top rung is.
            verdict = self._blame_death(payload, target, verdict, spec.rungs[:-1], otherwise=in_flight)
            in_flight = None
        elif in_flight is not None:
            verdict = replace(verdict, rung=in_flight, detail=f"{verdict.detail}; rung in flight: {in_flight}")
        elif verdict.symptom in _DEATHS.values() and probes:
            verdict = self._blame_death(payload, target, verdict, spec.rungs)
        if verdict.rung in spec.gate_rungs:  # it died in front of the target: not its bug
            verdict = replace(verdict, symptom=Symptom.INVALID,
                              detail=f"not exportable: the worker died in {verdict.rung}: {verdict.detail}")
        return verdict

    def _death_verdict(self, target: str, out: Any) -> Verdict:
        frames = tuple(Frame(file=_normalise(f[0]), line=int(f[1]), function=f[2]) for f in out.frames)
        if out.status in _DEATHS:
            symptom = _DEATHS[out.status]
            detail = f"the worker died while running {target}: {out.exc_message}"
        elif out.exc_type == "WorkerProtocolError":  # a reply NNForge did not write: recorded, never trusted
            return Verdict(target=target, symptom=Symptom.INVALID, detail=f"protocol error: {out.exc_message}")
        elif out.exc_type == "WorkerExited":  # the program or a compiler called exit()
            symptom, detail = Symptom.CRASH, f"the worker exited while running {target}: {out.exc_message}"
        else:  # the job itself failed: an oracle error, not a finding
            return Verdict(target=target, symptom=Symptom.INVALID,
                           detail=f"oracle error: {out.exc_type}: {out.exc_message}")
        return Verdict(target=target, symptom=symptom, exc_type=out.exc_type or out.signal, exc_message=out.exc_message,
                       frames=frames, detail=detail, timings={"elapsed_s": round(out.elapsed_s, 3)})

    def _blame_death(self, payload: dict[str, Any], target: str, verdict: Verdict, rungs: Any,
                     otherwise: str | None = None) -> Verdict:
        """`otherwise`: the rung known to have died (named by the worker's log), blamed when none
        of `rungs` (those below it) fails alone."""
        probes = []
        for rung in rungs:
            out = self._call(JOB, {**payload, "targets": [target], "rungs": {target: [rung]}}, timeout_s=self.timeout_s)
            if out.ok:
                v = out.value["verdicts"][0] if out.value["status"] == "ok" else None
                symptom = Symptom(v["symptom"]) if v else Symptom.INVALID
            else:
                symptom = _DEATHS.get(out.status, Symptom.CRASH)
            probes.append((rung, symptom))
            if symptom.is_bug:
                break
        if otherwise is not None and not any(sym.is_bug for _, sym in probes):
            below = f"; the rungs below it pass alone ({', '.join(r for r, _ in probes)})" if probes else ""
            return replace(verdict, rung=otherwise, detail=f"{verdict.detail}; rung in flight: {otherwise}{below}")
        return blame_death(verdict, probes)

    def _all_invalid(self, case: TestCase, reason: str, *, exc_type: str | None = None, exc_message: str | None = None,
                     frames: Any = None, search: dict[str, Any] | None = None) -> CaseResult:
        fr = tuple(Frame(**f) if isinstance(f, dict) else Frame(file=_normalise(f[0]), line=int(f[1]), function=f[2])
                   for f in (frames or ()))
        verdicts = tuple(Verdict(target=t, symptom=Symptom.INVALID, exc_type=exc_type, exc_message=exc_message,
                                 frames=fr, detail=reason) for t in self.targets)
        return CaseResult(case=case, verdicts=verdicts, search=search, invalid_reason=reason,
                          timings={"worker_s": round(getattr(self._spent, "s", 0.0), 4)})


def values_record(raw: Any) -> dict[str, Any] | None:
    """The worker's account of the value bin it drew from, checked for shape (it is data from a
    worker, and a program can forge replies); None when there is none or it is malformed."""
    if not isinstance(raw, dict) or not isinstance(raw.get("bin"), str) or not isinstance(raw.get("kept"), bool):
        return None
    leaves = raw.get("leaves") if isinstance(raw.get("leaves"), dict) else {}
    holds = raw.get("holds") if isinstance(raw.get("holds"), dict) else {}
    return {"bin": raw["bin"][:40], "kept": raw["kept"],
            "leaves": {str(k)[:80]: str(v)[:40] for k, v in list(leaves.items())[:64]},
            "holds": {str(k)[:80]: bool(v) for k, v in list(holds.items())[:64]}}


def value_bin_of(case: TestCase) -> str | None:
    """The value bin whose property a case's values have: its family when value search kept to
    it, "normal" when it had to leave it, None when the case records none."""
    rec = case.meta.get("values")
    if not isinstance(rec, dict) or not isinstance(rec.get("bin"), str):
        return None
    return rec["bin"] if rec.get("kept") else "normal"


def job_reply_problem(value: Any, *, targets: int) -> str | None:
    """What is wrong with a worker's `run_case` result, or None: the parent reads a reply only
    after checking it has the shape `job.run_case` writes (a program can forge replies)."""
    if not isinstance(value, dict):
        return f"the job's result is a {type(value).__name__}, not a dict"
    status = value.get("status")
    if status not in ("ok", "invalid"):
        return f"the job's status is {str(status)[:40]!r}"
    if status == "invalid":
        return None if isinstance(value.get("reason"), (str, type(None))) else "an invalid result without a reason"
    if not isinstance(value.get("timings", {}), dict) or not isinstance(value.get("coverage_new") or {}, dict):
        return "timings or coverage are not dicts"
    if targets == 0 and not (isinstance(value.get("inputs_pt"), bytes) and isinstance(value.get("state_pt"), bytes)):
        return "the reference run returned no values"
    verdicts = value.get("verdicts")
    if not isinstance(verdicts, list) or len(verdicts) < targets or not all(isinstance(v, dict) for v in verdicts):
        return f"expected {targets} verdict(s)"
    if not isinstance(value.get("dynamo") or {}, dict):
        return "the Dynamo record is not a dict"
    return None


def _normalise(path: str) -> str:
    from nnforge.oracle.job import normalise_file

    return normalise_file(path, set())


def _note_coverage(covered: dict[str, set[int]] | None, res: Any) -> None:
    """Merge a job result's `coverage_new` ({file: [lines]}) into `covered`."""
    if covered is None or not isinstance(res, dict):
        return
    for name, lines in (res.get("coverage_new") or {}).items():
        covered.setdefault(name, set()).update(lines)

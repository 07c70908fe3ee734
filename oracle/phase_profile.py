"""Where one test's seconds go: a worker job that times each phase of a test (bench/phases.py).

A test is value search, the eager reference (with its float64 run), and per rung of the target's
ladder a compile and a run and a comparison. torch.compile's own timers
(`torch._dynamo.utils.compilation_time_metrics`, seconds per instrumented function, nested)
split a rung's compile into Dynamo's tracing, AOTAutograd, Inductor's lowering and code
generation, the C++ compiler and loading the result; what the rung took beyond its compile is
running the compiled code and comparing it with eager (every call of the sequence, and for a
stateful case the second, cache-reset run).

The timers nest (a C++ compile happens inside code generation and inside loading), so each
phase is the outer timer less the inner ones it contains; a phase a rung lacks is 0.

Worker entry point: `nnforge.oracle.phase_profile:profile_case`; payload as `job.run_case`'s
(program, calls, seed, value_bin, value_search_budget_ms) plus `target`; each rung runs in its own
`run_case` on the values the first one chose.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nnforge.oracle.backend import parse_target
from nnforge.oracle.job import run_case

PHASES = ("value search", "reference", "dynamo", "aot_autograd", "inductor lowering", "inductor codegen",
          "c++ compile", "loading", "run and compare")

# timer names of torch 2.x (torch._dynamo.utils.compilation_time_metrics)
_COMPILE = "_compile.compile_inner"
_USER_COMPILER = "OutputGraph.call_user_compiler"
_AOT = "create_aot_dispatcher_function"
_INDUCTOR = "compile_fx_inner"
_CODEGEN = "GraphLowering.codegen"
_CPP = "compile_file"
_LOAD = "PyCodeCache.load_by_key_path"
_ASYNC_WAIT = "async_compile.wait"


def _timers() -> dict[str, list[float]]:
    """torch's compile timers: seconds of each timed call, by function (empty where torch has none)."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:
        return {}
    return compilation_time_metrics


def _metrics() -> dict[str, float]:
    return {k: float(sum(v)) for k, v in _timers().items()}


def _cpp_compiles() -> int:
    """How many times the C++ compiler has run in this process (each Inductor kernel module is
    one run, and most of its cost is fixed: loading the precompiled ATen header)."""
    return len(_timers().get(_CPP, ()))


def split_compile(delta: dict[str, float], rung_s: float, cpp_in_codegen: float | None = None) -> dict[str, float]:
    """A rung's seconds by phase, from the growth of torch's compile timers over its run.

    The C++ compiler runs inside code generation (the ISA probes of a fresh process; all
    kernels in older torch) or inside loading the generated module (torch 2.13's kernels:
    code generation is Python only and loading waits for the compile). `cpp_in_codegen`, the
    compiler seconds measured inside code generation (`cpp_seconds_in_codegen`), takes each
    part out of the phase that holds it; without it the larger of the two is taken to hold all.
    """
    g = lambda name: max(0.0, delta.get(name, 0.0))  # noqa: E731
    compile_s = min(g(_COMPILE), rung_s)
    backend_s = min(g(_USER_COMPILER), compile_s)
    inductor_s = min(g(_INDUCTOR), backend_s)
    cpp_s = min(g(_CPP), inductor_s)
    codegen_all = min(g(_CODEGEN), inductor_s)
    load_all = min(g(_LOAD) + g(_ASYNC_WAIT), inductor_s)
    if cpp_in_codegen is None:
        cpp_in_load = min(load_all, cpp_s) if load_all >= codegen_all else 0.0
        cpp_in_codegen = min(codegen_all, cpp_s - cpp_in_load)
    else:
        cpp_in_codegen = min(codegen_all, cpp_s, max(0.0, cpp_in_codegen))
        cpp_in_load = min(load_all, cpp_s - cpp_in_codegen)
    codegen_s = codegen_all - cpp_in_codegen
    load_s = load_all - cpp_in_load
    lowering_s = max(0.0, inductor_s - cpp_s - codegen_s - load_s)
    return {
        "dynamo": compile_s - backend_s,
        "aot_autograd": max(0.0, backend_s - inductor_s),
        "inductor lowering": lowering_s,
        "inductor codegen": codegen_s,
        "c++ compile": cpp_s,
        "loading": load_s,
        "run and compare": max(0.0, rung_s - compile_s),
    }


@contextmanager
def cpp_seconds_in_codegen() -> Iterator[list[float]]:
    """[seconds]: how long the C++ compiler ran inside Inductor's code generation while the
    block ran (GraphLowering.codegen wrapped; torch's timers alone do not say where it ran)."""
    from torch._inductor.graph import GraphLowering

    total = [0.0]
    original = GraphLowering.codegen

    def codegen(self: Any, *args: Any, **kwargs: Any) -> Any:
        before = sum(_timers().get(_CPP, ()))
        try:
            return original(self, *args, **kwargs)
        finally:
            total[0] += max(0.0, sum(_timers().get(_CPP, ())) - before)

    GraphLowering.codegen = codegen  # type: ignore[method-assign]
    try:
        yield total
    finally:
        GraphLowering.codegen = original  # type: ignore[method-assign]


def profile_case(payload: dict[str, Any]) -> dict[str, Any]:
    """{"phases": {phase: seconds}, "rungs": {rung: seconds}, "symptom": str} for one test on
    `payload["target"]`, every rung run (as the ladder would when the top rung disagrees).

    The C++ compiler runs in this process here, where torch's timers see it (a compile pool's
    runs are invisible to them); on a campaign machine whose cores are all busy the pool gains
    nothing anyway, so the split is of CPU seconds as a campaign spends them.
    """
    import torch._inductor.config as inductor_config

    with inductor_config.patch(compile_threads=1):
        return _profile_case(payload)


def _profile_case(payload: dict[str, Any]) -> dict[str, Any]:
    target = str(payload["target"])
    first = run_case({**payload, "targets": [], "search": True})
    if first["status"] != "ok":
        return {"status": "invalid", "reason": first.get("reason")}
    phases = dict.fromkeys(PHASES, 0.0)
    phases["value search"] = float(first["timings"].get("prepare_s", 0.0))
    phases["reference"] = float(first["timings"].get("reference_s", 0.0))
    fixed = {**payload, "inputs_pt": first["inputs_pt"], "state_pt": first["state_pt"], "search": False}
    rungs: dict[str, float] = {}
    symptom = "pass"
    compiles = 0
    for rung in parse_target(target).spec.rungs:
        before = _metrics()
        compiles_before = _cpp_compiles()
        t0 = time.perf_counter()
        with cpp_seconds_in_codegen() as in_codegen:
            out = run_case({**fixed, "targets": [target], "rungs": {target: [rung]}})
        wall = time.perf_counter() - t0
        ref_s = float(out["timings"].get("reference_s", 0.0))
        rung_s = max(0.0, wall - ref_s - float(out["timings"].get("prepare_s", 0.0)))
        after = _metrics()
        compiles_after = _cpp_compiles()
        compiles += compiles_after - compiles_before if compiles_after >= compiles_before else compiles_after
        # torch._dynamo.reset() clears the timers: a timer that shrank restarted during the rung
        delta = {k: v - before.get(k, 0.0) if v >= before.get(k, 0.0) else v for k, v in after.items()}
        for phase, s in split_compile(delta, rung_s, in_codegen[0]).items():
            phases[phase] += s
        rungs[rung] = round(rung_s, 4)
        if out["status"] == "ok" and out["verdicts"] and out["verdicts"][0]["symptom"] != "pass" and symptom == "pass":
            symptom = out["verdicts"][0]["symptom"]
    return {"status": "ok", "phases": {k: round(v, 4) for k, v in phases.items()}, "rungs": rungs, "symptom": symptom,
            "cpp_compiles": compiles}

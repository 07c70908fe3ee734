"""`nnforge reduce CASE_DIR`: shrink a failing case to the smallest one that shows the same bug.

The verdict to preserve comes from `verdicts.json` (or `verdict.json`) in the folder when it
holds one for the target, else from running the oracle on the case. The reduced case is written
as a TestCase folder (default CASE_DIR-reduced) with `verdict.json` (the reduced case's verdict)
and `reduction.json` (queries, time, sizes, the passes' log).

Exit status: 0 reduced and verified, 1 reduced but the final check did not show the same bug
(the folder then holds the input case), 2 nothing to reduce (no bug on the target) or bad input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from nnforge.agent.cli import app
from nnforge.core.settings import load_settings
from nnforge.core.testcase import CaseFormatError, TestCase
from nnforge.core.verdict import Verdict


def stored_verdict(case_dir: Path, target: str) -> Verdict | None:
    """The verdict for `target` saved beside the case (verdicts.json / verdict.json), if any."""
    for name in ("verdicts.json", "verdict.json"):
        path = case_dir / name
        if not path.is_file():
            continue
        try:
            data: Any = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(data, dict) and "verdicts" in data:
            data = data["verdicts"]
        items = data if isinstance(data, list) else [data]
        for item in items:
            if isinstance(item, dict) and item.get("target") == target and "symptom" in item:
                try:
                    return Verdict.from_json(item)
                except (TypeError, ValueError):
                    continue
    return None


@app.command()
def reduce(
    case_dir: Path = typer.Argument(..., metavar="CASE_DIR",
                                    help="A TestCase folder (holding program.py) that fails on the target."),
    target: str = typer.Option("inductor", "--target", help="The target whose bug to preserve."),
    out_dir: Optional[Path] = typer.Option(None, "-o", "--out", help="Where to write the reduced case (default CASE_DIR-reduced)."),
    budget_s: float = typer.Option(300.0, "--budget-s", help="Time budget for the reduction, seconds."),
    max_queries: int = typer.Option(300, "--max-queries", help="Most sandbox checks to run."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds per worker call (default: NNFORGE_WORKER_TIMEOUT_S)."),
) -> None:
    """Reduce a failing case (calls, graph nodes, statements, expressions, arguments, literals)."""
    from nnforge.oracle.backend import parse_target
    from nnforge.oracle.oracle import Oracle
    from nnforge.oracle.sandbox import WorkerPool
    from nnforge.triage.reducer import Reducer, describe_reduction

    console = Console()
    settings = load_settings()
    try:
        case = TestCase.load(case_dir)
        parse_target(target)
    except (CaseFormatError, ValueError) as e:
        console.print(f"[red]{e}[/red]", soft_wrap=True)
        raise typer.Exit(2)
    timeout_s = float(timeout) if timeout is not None else settings.worker_timeout_s
    out = out_dir or case_dir.with_name(case_dir.name + "-reduced")
    with WorkerPool(size=1, timeout_s=timeout_s, memory_mb=settings.worker_memory_mb,
                    inductor_cache_dir=settings.inductor_cache_dir) as pool:
        verdict = stored_verdict(case_dir, target) if case.inputs is not None else None
        if verdict is None:
            result = Oracle(pool, [target], settings.value_search_budget_ms, timeout_s=timeout_s).check(case)
            verdict, case = result.verdicts[0], result.case
        if not verdict.is_bug:
            console.print(f"nothing to reduce: {target} gives {verdict.symptom.value} on {case_dir}")
            raise typer.Exit(2)
        console.print(f"preserving: {verdict.symptom.value} on {target}, rung {verdict.rung}"
                      + (f", {verdict.exc_type}" if verdict.exc_type else ""))
        reducer = Reducer(pool, target, timeout_s=timeout_s, max_queries=max_queries, time_budget_s=budget_s,
                          value_search_budget_ms=settings.value_search_budget_ms)
        res = reducer.reduce(case, verdict)
    res.case.save(out)
    (out / "verdict.json").write_text(json.dumps(res.verdict.to_json(), indent=2, sort_keys=True, default=str))
    (out / "reduction.json").write_text(json.dumps(res.to_json(), indent=2, default=str))
    from nnforge.triage.repro import write_repro

    (out / "repro.py").write_text(write_repro(res.case, res.verdict))
    console.print(f"{describe_reduction(res.before, res.after)}; {res.queries} queries, {res.elapsed_s:.1f} s"
                  + (f" (out of {res.exhausted})" if res.exhausted else ""), highlight=False)
    for step in res.steps:
        console.print(f"  {step}", soft_wrap=True)
    console.print(f"wrote {out} (repro.py: a standalone script, exit 1 while the bug is there)")
    raise typer.Exit(0 if res.verified else 1)

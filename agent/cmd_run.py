"""`nnforge run CASE_DIR`: judge one TestCase folder on every target and show the blame.

Exit status: 0 every target passes, 1 a bug (any target), 2 the case is invalid (the reference
fails) or the folder is missing or malformed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nnforge.agent.cli import app
from nnforge.core.settings import load_settings
from nnforge.core.testcase import INPUTS_FILE, STATE_FILE, CaseFormatError, TestCase
from nnforge.core.verdict import Symptom, Verdict

DEFAULT_TARGETS = "inductor,ort,tvm"
_STYLE = {Symptom.PASS: "green", Symptom.INVALID: "yellow"}


@app.command()
def run(
    case_dir: Path = typer.Argument(..., metavar="CASE_DIR", help="A TestCase folder (holding program.py)."),
    targets: str = typer.Option(DEFAULT_TARGETS, "--targets", help="Comma-separated targets, e.g. inductor,ort,tvm."),
    timeout: float = typer.Option(None, "--timeout", help="Seconds per worker call (default: NNFORGE_WORKER_TIMEOUT_S)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON instead of a table."),
    save_values: bool = typer.Option(False, "--save-values", help="Save the chosen values even if the folder has some."),
    value_search_budget_ms: Optional[float] = typer.Option(None, "--value-search-budget-ms", "--search-budget-ms",
                                                           help="Value search time budget in ms (default: "
                                                                "NNFORGE_VALUE_SEARCH_BUDGET_MS, 500)."),
    all_rungs: bool = typer.Option(False, "--all-rungs", help="Run every rung, not only up to the first failing one."),
    sandbox: Optional[str] = typer.Option(None, "--sandbox", help="strong (default) or basic: see `nnforge campaign --help`."),
) -> None:
    """Run value search, the reference and every target's blame ladder on one case."""
    from nnforge.oracle.backend import parse_target
    from nnforge.oracle.oracle import Oracle
    from nnforge.oracle.sandbox import WorkerPool

    console = Console(stderr=as_json)
    from nnforge.agent.cmd_campaign import use_sandbox_level

    use_sandbox_level(sandbox, Console(stderr=True))
    settings = load_settings()
    try:
        case = TestCase.load(case_dir)
    except CaseFormatError as e:
        console.print(f"[red]not a TestCase folder: {e}[/red]", soft_wrap=True)
        raise typer.Exit(2)
    except Exception as e:  # e.g. an inputs.pt that does not load
        console.print(f"[red]cannot read the case in {case_dir}: {type(e).__name__}: {e}[/red]", soft_wrap=True)
        raise typer.Exit(2)
    target_list = [t.strip() for t in targets.split(",") if t.strip()]
    try:
        for t in target_list:
            parse_target(t)
    except ValueError as e:  # an unknown target or parameter
        console.print(f"[red]{e}[/red]", soft_wrap=True)
        raise typer.Exit(2)
    timeout_s = float(timeout) if timeout is not None else settings.worker_timeout_s
    budget = value_search_budget_ms if value_search_budget_ms is not None else settings.value_search_budget_ms
    # The case's folder and the folder around it are the user's: the program may write neither.
    case_path = Path(case_dir).resolve()
    with WorkerPool(size=1, timeout_s=timeout_s, memory_mb=settings.worker_memory_mb,
                    inductor_cache_dir=settings.inductor_cache_dir or None, warm=(),
                    protect=(str(case_path), str(case_path.parent))) as pool:
        result = Oracle(pool, target_list, budget, stop_at_first=not all_rungs).check(case)

    saved = _save_values(case_dir, result, force=save_values)
    if as_json:
        out = result.to_json()
        out["saved_values"] = saved
        typer.echo(json.dumps(out, indent=2, default=str))
    else:
        _print_table(console, case_dir, result, saved)
    symptom = result.symptom
    raise typer.Exit(0 if symptom is Symptom.PASS else 2 if symptom is Symptom.INVALID else 1)


def _save_values(case_dir: Path, result: object, force: bool) -> bool:
    """Write inputs.pt/state_dict.pt if the folder had none (or if forced); True if written."""
    import torch

    case = result.case  # type: ignore[attr-defined]
    if case.inputs is None or result.invalid_reason is not None:  # type: ignore[attr-defined]
        return False
    if not force and ((case_dir / INPUTS_FILE).exists() or (case_dir / STATE_FILE).exists()):
        return False
    torch.save(tuple(case.inputs), case_dir / INPUTS_FILE)
    if case.state_dict is not None:
        torch.save(dict(case.state_dict), case_dir / STATE_FILE)
    return True


# Below this many columns (an 80-column terminal, a pipe) rung and call go under the verdict and the
# error above the detail, so that the text a person reads first keeps most of the width.
WIDE_TABLE_COLUMNS = 120


def _error_text(v: Verdict) -> str:
    if v.exc_type:
        return f"{v.exc_type}: {(v.exc_message or '').splitlines()[0][:120] if v.exc_message else ''}"
    if v.max_abs_err is not None:
        err = f"max abs {v.max_abs_err:.3g}"
        if v.fp64_rmse_actual is not None:
            err += f", fp64 RMSE {v.fp64_rmse_actual:.3g} vs eager {v.fp64_rmse_eager:.3g}"
        return err
    return ""


def verdict_table(title: str, verdicts: list[Verdict], width: int) -> Table:
    """One row per target, laid out for a console `width` columns wide: short columns never wrap,
    error and detail fold and are never cut."""
    table = Table(title=escape(title))
    wide = width >= WIDE_TABLE_COLUMNS
    cols = ("target", "verdict", "guilty rung", "call") if wide else ("target", "verdict")
    for col in cols:
        table.add_column(col, no_wrap=True)
    if wide:
        table.add_column("error", overflow="fold", ratio=1)
        table.add_column("detail", overflow="fold", ratio=2)
    else:
        table.add_column("error / detail", overflow="fold", ratio=1, min_width=20)
    for v in verdicts:
        style = _STYLE.get(v.symptom, "red")
        err, detail = escape(_error_text(v)), escape(v.detail[:400])
        call = "" if v.call_index is None else str(v.call_index)
        if wide:
            table.add_row(v.target, f"[{style}]{v.symptom.value}{' (stateful)' if v.stateful else ''}[/{style}]",
                          v.rung or "", call, err, detail)
            continue
        lines = [f"[{style}]{v.symptom.value}[/{style}]"] + (["(stateful)"] if v.stateful else [])
        lines += ([f"rung {v.rung}"] if v.rung else []) + ([f"call {call}"] if call else [])
        text = [t for t in (err, f"[dim]{detail}[/dim]" if detail else "") if t]
        table.add_row(v.target, "\n".join(lines), "\n".join(text))
    return table


def _print_table(console: Console, case_dir: Path, result: object, saved: bool) -> None:
    table = verdict_table(f"{case_dir}  ({result.case.case_id})", list(result.verdicts),  # type: ignore[attr-defined]
                          console.width)
    console.print(table)
    search = result.search  # type: ignore[attr-defined]
    if search:
        console.print(f"value search: {'ok' if search.get('success') else 'failed'}"
                      f" ({search.get('method', '')}, {search.get('iterations', 0)} iterations,"
                      f" {search.get('elapsed_ms', 0):.0f} ms)")
    if result.invalid_reason:  # type: ignore[attr-defined]
        console.print(f"[yellow]invalid case: {result.invalid_reason}[/yellow]")  # type: ignore[attr-defined]
    if saved:
        console.print(f"saved the chosen values to {case_dir / INPUTS_FILE}")

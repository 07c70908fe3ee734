"""`nnforge demo`: generate a handful of programs and judge them, with one table of the verdicts.

The smallest end-to-end tour: the z3 generator, value search, and the oracle on CPU
torch.compile (inductor), ONNX Runtime and TVM, in sandboxed workers, every case and verdict
written under DIR. `make demo` runs a short campaign instead (`nnforge campaign --budget 90s`).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from nnforge.agent.cli import app
from nnforge.core.settings import load_settings
from nnforge.core.verdict import Symptom
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_cases


@app.command()
def demo(
    output: Path = typer.Option(Path("demo-out"), "-o", "--output", help="Folder for the cases and verdicts."),
    count: int = typer.Option(5, "--count", help="How many programs."),
    nodes: int = typer.Option(6, "--nodes", help="Operators per program."),
    seed: int = typer.Option(0, "--seed"),
    targets: str = typer.Option("inductor,ort,tvm", "--targets"),
    workers: int = typer.Option(2, "--workers", help="Sandboxed worker processes."),
) -> None:
    """Generate a few programs and run each through value search and the oracle."""
    from nnforge.oracle.oracle import Oracle
    from nnforge.oracle.sandbox import WorkerPool

    console = Console()
    settings = load_settings()
    target_list = [t.strip() for t in targets.split(",") if t.strip()]
    try:
        (output / "cases").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        console.print(f"[red]cannot create {output}: {e}[/red]")
        raise typer.Exit(2)
    cfg = GeneratorConfig(n_nodes=nodes, seed=seed, onnx_only=True)
    console.print(f"[bold]NNForge demo[/bold]: {count} programs of {nodes} ops, targets {', '.join(target_list)}")
    console.print(f"starting {workers} sandboxed workers (first torch.compile may take ~30 s on a cold cache) ...")
    table = Table("case", "ops", "value search", *target_list, title="verdicts (rung = guilty layer)",
                  expand=True)
    tally: Counter = Counter()
    t0 = time.perf_counter()
    with WorkerPool(size=workers, timeout_s=settings.worker_timeout_s, memory_mb=settings.worker_memory_mb) as pool:
        pool.warmup()
        oracle = Oracle(pool, target_list, value_search_budget_ms=settings.value_search_budget_ms)
        for case, gen in generate_cases(cfg, count):
            folder = output / "cases" / f"gen-{case.meta['seed']:06d}"
            case.save(folder)
            result = oracle.check(case)
            result.case.save(folder)  # now with the values value search chose
            (folder / "verdicts.json").write_text(json.dumps(result.to_json(), indent=2, default=str))
            search = result.search or {}
            found = "ok" if search.get("success") else ("failed" if search else "-")
            cells = []
            for v in result.verdicts:
                tally[(v.target, v.symptom.value)] += 1
                style = "green" if v.symptom is Symptom.PASS else ("yellow" if v.symptom is Symptom.INVALID else "red")
                cells.append(f"[{style}]{v.symptom.value}[/{style}]" + (f" ({v.rung})" if v.rung and v.is_bug else ""))
            ops = gen.graph.ops()
            table.add_row(folder.name, f"{len(ops)}: " + ", ".join(ops[:3]) + (", ..." if len(ops) > 3 else ""),
                          f"{found} ({search.get('iterations', 0)} it)", *cells)
            console.print(f"  {folder}: {result.symptom.value}")
    console.print(table)
    console.print(f"done in {time.perf_counter() - t0:.0f} s; cases and verdicts.json under {output / 'cases'}")
    console.print("next: nnforge run <case folder> --targets inductor,ort,tvm   (to judge one case again)")

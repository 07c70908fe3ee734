"""`nnforge generate`: write solver-generated TestCase folders."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from nnforge.agent.cli import app
from nnforge.generator.engine import GeneratorConfig
from nnforge.generator.seeds import generate_cases


def _csv(value: Optional[str]) -> Optional[tuple[str, ...]]:
    return tuple(x.strip() for x in value.split(",") if x.strip()) if value else None


@app.command()
def generate(
    output: Path = typer.Option(..., "-o", "--output", help="Folder that receives one TestCase folder per program."),
    nodes: int = typer.Option(10, "--nodes", help="Operators per program."),
    count: int = typer.Option(20, "--count", help="How many programs."),
    seed: int = typer.Option(0, "--seed", help="Seed of the first program; program i uses seed+i."),
    ops: Optional[str] = typer.Option(None, "--ops", help="Comma-separated operator names (default: all)."),
    exclude_ops: Optional[str] = typer.Option(None, "--exclude-ops", help="Comma-separated operators to leave out."),
    dtypes: Optional[str] = typer.Option(None, "--dtypes", help="Comma-separated placeholder dtypes (default: all ten)."),
    no_binning: bool = typer.Option(False, "--no-binning", help="Turn attribute binning off."),
    onnx_only: bool = typer.Option(False, "--onnx-only", help="Only operators that export to ONNX."),
    timeout_ms: float = typer.Option(4000.0, "--timeout-ms", help="Solver time per program."),
) -> None:
    """Generate random, valid tensor programs with the z3 generator."""
    console = Console(stderr=True)
    cfg = GeneratorConfig(n_nodes=nodes, seed=seed, ops=_csv(ops), exclude_ops=_csv(exclude_ops) or (),
                          binning=not no_binning, onnx_only=onnx_only, timeout_ms=timeout_ms,
                          **({"dtypes": _csv(dtypes)} if dtypes else {}))
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        console.print(f"[red]cannot create {output}: {e}[/red]")
        raise typer.Exit(2)
    try:
        stream = generate_cases(cfg, count)
        for i, (case, gen) in enumerate(stream):
            folder = case.save(output / f"gen-{seed + i:06d}")
            console.print(f"{folder}  {len(gen.graph.nodes)} ops  {len(gen.graph.inputs)} in / {len(gen.graph.outputs)} out"
                          f"  {gen.elapsed_ms:.0f} ms")
    except ValueError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2)

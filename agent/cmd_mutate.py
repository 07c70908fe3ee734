"""`nnforge mutate CASE_DIR`: write mutants of one TestCase aimed at a root-cause category;
`nnforge mutators`: list the registered mutators and the categories they cover.

Mutants are checked in eager in a sandbox worker before they are written (unless --no-validate):
an invalid mutant is reported and left out. `--llm openai` asks the chat model the settings name
(NNFORGE_LLM_BASE_URL, _MODEL, _API_KEY) for the rewrite; when it is unreachable or out of budget,
the offline rules of the same category are used and a warning says so once. Exit status: 0 at least one mutant written (or
--count 0), 1 none could be made, 2 bad arguments or a folder that is not a TestCase.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

from nnforge.agent.cli import app
from nnforge.core.llm import PROVIDERS, LLMClient
from nnforge.core.settings import Settings, load_settings
from nnforge.core.testcase import CaseFormatError, TestCase
from nnforge.mutators.base import CATEGORIES, Mutator, all_mutators, get_mutator, mutators_for
from nnforge.mutators.validate import check_case, eager_probe


def choose_mutators(category: Optional[str], mutator: Optional[str]) -> list[Mutator]:
    """The mutators the options name (ValueError with a readable message otherwise)."""
    if category is not None and category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; known: {', '.join(CATEGORIES)}")
    if mutator is not None:
        try:
            m = get_mutator(mutator)
        except KeyError as e:
            raise ValueError(str(e.args[0])) from e
        if category is not None and m.category != category:
            raise ValueError(f"mutator {mutator!r} aims at {m.category}, not {category}")
        return [m]
    return mutators_for(category) if category is not None else list(all_mutators().values())


@app.command()
def mutate(
    case_dir: Path = typer.Argument(..., metavar="CASE_DIR", help="A TestCase folder (holding program.py)."),
    output: Path = typer.Option(..., "-o", "--output", help="Folder that receives one TestCase folder per mutant."),
    category: Optional[str] = typer.Option(None, "--category", help=f"Root-cause category: {', '.join(CATEGORIES)}."),
    mutator: Optional[str] = typer.Option(None, "--mutator", help="One mutator by name (see `nnforge mutators`)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the first mutant; mutant i uses seed+i."),
    count: int = typer.Option(1, "--count", help="How many mutants to try to make."),
    no_validate: bool = typer.Option(False, "--no-validate", help="Write mutants without running them in eager."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds per validation (default: NNFORGE_WORKER_TIMEOUT_S)."),
    llm: Optional[str] = typer.Option(None, "--llm", help=f"LLM provider: {' or '.join(PROVIDERS)} (default: NNFORGE_LLM_PROVIDER)."),
) -> None:
    """Rewrite one case into mutants that exercise a root-cause category (offline rules, or an LLM)."""
    console = Console(stderr=True)
    client: Optional[LLMClient] = None
    try:
        case = TestCase.load(case_dir, with_values=False)
        settings = load_settings(**({"llm_provider": llm} if llm is not None else {}))
        client = LLMClient.from_settings(settings)
        chosen = choose_mutators(category, mutator) if client is None else choose_llm_mutators(category, mutator, client, settings)
    except (CaseFormatError, ValueError) as e:
        console.print(f"[red]{e}[/red]", soft_wrap=True)
        raise typer.Exit(2)
    usable = [m for m in chosen if m.applicable(case)]
    if not usable:
        names = ", ".join(m.name for m in chosen)
        console.print(f"[red]no mutator applies to {case_dir} (tried: {names}); "
                      f"`nnforge mutators` lists what each one needs[/red]", soft_wrap=True)
        raise typer.Exit(1)
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        console.print(f"[red]cannot create {output}: {e}[/red]")
        raise typer.Exit(2)
    if no_validate:
        written = _make(case, case_dir.name, usable, seed, count, output, console, call=None, timeout_s=None)
    else:
        from nnforge.oracle.sandbox import WorkerPool

        timeout_s = float(timeout) if timeout is not None else settings.worker_timeout_s
        with WorkerPool(size=1, timeout_s=timeout_s, memory_mb=settings.worker_memory_mb,
                        inductor_cache_dir=settings.inductor_cache_dir) as pool:
            written = _make(case, case_dir.name, usable, seed, count, output, console, call=pool.call,
                            timeout_s=timeout_s)
    if client is not None:
        st = client.stats()
        console.print(f"LLM: {st['calls']} calls, {st['cache_hits']} from the cache, {st['tokens']} tokens, "
                      f"{st['retries']} retries, {st['failures']} failures")
    raise typer.Exit(0 if written or count == 0 else 1)


def choose_llm_mutators(category: Optional[str], mutator: Optional[str], client: LLMClient,
                        settings: Settings) -> list[Mutator]:
    """One LLM mutator for the category (every category when none is named); examples kept in the cache dir."""
    from nnforge.mutators.examples import ExampleBank
    from nnforge.mutators.llm import llm_mutators

    if mutator is not None:
        raise ValueError("--mutator names an offline rule; with --llm, choose the category only")
    if category is not None and category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; known: {', '.join(CATEGORIES)}")
    cats = (category,) if category is not None else CATEGORIES
    bank = ExampleBank(settings.llm_cache_dir)
    return list(llm_mutators(client, bank=bank, max_repairs=settings.llm_max_repairs, categories=cats).values())


def _make(case: TestCase, stem: str, usable: list[Mutator], seed: int, count: int, output: Path, console: Console,
          call: Optional[Callable[..., Any]], timeout_s: Optional[float]) -> int:
    """Make `count` mutants (mutant i from seed+i), validate them through `call` if given, write the valid ones."""
    probe = eager_probe(call) if call is not None else None
    written = 0
    for i in range(count):
        rng = random.Random(seed + i)
        m = rng.choice(usable)
        mutant = m.mutate(case, rng, probe if m.uses_probe else None)
        if mutant is None:
            console.print(f"[yellow]#{i} {m.name}: no mutant (nothing to anchor on, or no candidate ran)[/yellow]")
            continue
        if call is not None:
            check = check_case(call, mutant, timeout_s=timeout_s)
            if not check.ok:
                console.print(f"[red]#{i} {m.name}: invalid mutant ({check.stage}: {check.error})[/red]", soft_wrap=True)
                continue
        made_by = str(mutant.meta.get("mutator", m.name))
        folder = mutant.save(output / f"{stem}-{made_by}-{seed + i:04d}")
        written += 1
        steps = f", {len(mutant.calls)} calls" if len(mutant.calls) > 1 else ""
        fallback = f" [yellow](instead of {m.name}: {mutant.meta['llm_fallback']})[/yellow]" if "llm_fallback" in mutant.meta else ""
        console.print(f"{folder}  {made_by} ({m.category}{steps}){fallback}", soft_wrap=True)
    console.print(f"{written} of {count} mutants written to {output}")
    return written


@app.command("mutators")
def list_mutators() -> None:
    """List the offline mutators: name, category, what each needs from a program."""
    console = Console()
    muts = all_mutators()
    table = Table(title=f"{len(muts)} mutators")
    for col in ("category", "mutator", "needs", "what the mutant does"):
        table.add_column(col, overflow="fold")
    order = {c: i for i, c in enumerate(CATEGORIES)}
    for m in sorted(muts.values(), key=lambda m: (order[m.category], m.name)):
        table.add_row(m.category, m.name, "; ".join(m.needs), m.summary)
    console.print(table)
    provider = load_settings().llm_provider
    console.print(f"LLM mutators: llm_<category> for every category ({', '.join(CATEGORIES)}), "
                  f"with `nnforge mutate --llm openai` (provider now: {provider}); they fall back to the rules above.",
                  soft_wrap=True)
    missing = [c for c in CATEGORIES if not any(m.category == c for m in muts.values())]
    if missing:
        console.print(f"[yellow]categories without a mutator: {', '.join(missing)}[/yellow]")

"""`nnforge campaign`: run a fuzzing campaign into a folder, or resume one.

    nnforge campaign --budget 8h --targets inductor,ort,tvm --workers 2 --llm none -o DIR
    nnforge campaign --resume DIR                  # after Ctrl-C or a kill: continue, same budget
    nnforge campaign --resume DIR --budget 10h     # ... with a new total budget

DIR receives store.sqlite (every test, finding, cluster, the stats timeline, the scheduler's
state), cases/<case_id>/ (every case run), findings/<cluster>/ (repro.py, report.md, case/;
written by triage as findings come, or later by `nnforge triage DIR`), summary.md and
report.html. A live panel shows progress on a terminal; off a terminal, plain lines.

Exit status: 0 the budget was spent, 130 the campaign was interrupted (Ctrl-C or SIGTERM; what
was recorded is kept: resume it), 2 it could not start (unwritable folder, too little disk space,
a folder in use by another campaign, bad options or settings), 3 the disk filled up during the
run (everything recorded is kept). A script can tell a finished campaign from a stopped one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from nnforge.agent.cli import app
from nnforge.core.settings import load_settings


# 128 + SIGINT: what a shell reports for a command stopped by Ctrl-C, so `nnforge campaign ... || ...`
# and CI scripts tell an interrupted campaign from one that spent its budget (0).
EXIT_INTERRUPTED = 130
EXIT_DISK_FULL = 3

# Shown under the options of `nnforge campaign --help` (Rich markup: one line each, as written).
EXAMPLES = """[bold]Examples[/bold]

  overnight, on inductor, ONNX Runtime and TVM:
    nnforge campaign --budget 8h --targets inductor,ort,tvm -o night/
  torch.compile's Inductor only:
    nnforge campaign --budget 2h --targets inductor -o inductor/
  continue after Ctrl-C or a kill (same budget; --budget gives a new total):
    nnforge campaign --resume night/
    nnforge campaign --resume night/ --budget 10h
  the ONNX targets (ONNX Runtime and TVM through ONNX export):
    nnforge campaign --budget 1h --targets ort,tvm -o onnx/
  with LLM mutators (NNFORGE_LLM_BASE_URL, _MODEL, _API_KEY in .env):
    nnforge campaign --budget 8h --llm openai -o llm/"""


def _split(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def exit_status(reason: str) -> int:
    """The exit status for how a campaign ended (its outcome's reason); see the module docstring."""
    return {"interrupted": EXIT_INTERRUPTED, "disk full": EXIT_DISK_FULL}.get(reason, 0)


@app.command(epilog=EXAMPLES)
def campaign(
    budget: Optional[str] = typer.Option(None, "--budget", help="Wall-clock budget: 60s, 10m, 8h, 1h30m (a bare "
                                                               "number is seconds). With --resume: the new total "
                                                               "(default: the stored one)."),
    targets: str = typer.Option("inductor,ort,tvm", "--targets", help="Comma-separated targets."),
    workers: int = typer.Option(2, "--workers", help="Sandboxed workers (tests run in parallel)."),
    llm: str = typer.Option("none", "--llm", help="none (offline mutators) or openai (LLM mutators, settings' endpoint)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="The campaign folder (new)."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue the campaign in this folder."),
    seeds: str = typer.Option("generator", "--seeds", help="Seed sources: generator[,history:DIR]."),
    mutant_share: float = typer.Option(0.5, "--mutant-share", "--mutate-prob",
                                       help="Share of the workers' test time spent on mutants (the rest: plain "
                                            "generator programs); 0: no mutants. --mutate-prob is its old name."),
    nodes: int = typer.Option(8, "--nodes", help="Operators per generated program."),
    seed: int = typer.Option(0, "--seed", help="First generator seed; also seeds the scheduler."),
    triage: bool = typer.Option(True, "--triage/--no-triage", help="Reduce and cluster findings as they come."),
    triage_budget_s: float = typer.Option(60.0, "--triage-budget-s", help="Seconds per finding's reduction."),
    executor: str = typer.Option("local", "--executor", help="local (process pool) or ray."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (default: a local Ray)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds per worker call (default: NNFORGE_WORKER_TIMEOUT_S)."),
    coverage: bool = typer.Option(False, "--coverage/--no-coverage", help="Measure compiler line coverage in the "
                                                                           "workers; new lines reward the scheduler."),
    report_every: float = typer.Option(300.0, "--report-every", help="Seconds between summary/report rewrites."),
    plain: bool = typer.Option(False, "--plain", help="Plain log lines even on a terminal."),
    sandbox: Optional[str] = typer.Option(None, "--sandbox", help="strong (default: no network, no capabilities, "
                                                                   "parent unreadable) or basic (scrubbed env only)."),
    backward_share: Optional[float] = typer.Option(None, "--backward-share",
                                                   help="Share of torch.compile tests whose calls also run a backward "
                                                        "and compare gradients, besides the training mutants; 0: "
                                                        "forward only, no training mutants (default: "
                                                        "NNFORGE_BACKWARD_SHARE, 0.2)."),
    pack: Optional[int] = typer.Option(None, "--pack", help="Generator programs judged together in one "
                                                            "torch.compile test (generator/pack.py; default: "
                                                            "NNFORGE_PACK, 8)."),
    pack_mutants: Optional[int] = typer.Option(None, "--pack-mutants",
                                               help="Single-call mutants judged together in one torch.compile "
                                                    "test (mutators/pack.py; sequences, graph-break and random "
                                                    "rewrites run alone; default: NNFORGE_PACK_MUTANTS, 8)."),
    value_bins: Optional[bool] = typer.Option(None, "--value-bins/--no-value-bins",
                                              help="Draw each test's values from a bin the scheduler picks (all "
                                                   "positive, ties, constant, ...; default: NNFORGE_VALUE_BINS, on) "
                                                   "or always from the default draw."),
    gate_check: bool = typer.Option(True, "--gate-check/--no-gate-check",
                                    help="Check each ort/tvm program against the ONNX export gate on the probe "
                                         "worker before it becomes a test, and draw or mutate again where the "
                                         "gate would stop it (default on)."),
) -> None:
    """Fuzz the targets for a time budget: generate, mutate, judge, triage, report.

    Exit status: 0 budget spent, 130 interrupted (--resume continues it), 2 could not start, 3 disk full."""
    from nnforge.agent.campaign import Campaign
    from nnforge.agent.campaign_config import CampaignConfig, CampaignSetupError, parse_budget
    from nnforge.agent.lock import CampaignLocked
    from nnforge.agent.status import StatusDisplay

    import faulthandler
    import signal

    try:  # `kill -USR1 PID` prints every thread's stack: where is a stuck campaign?
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (OSError, ValueError, AttributeError):  # no real stderr (e.g. under a test runner)
        pass
    console = Console()
    err = Console(stderr=True)
    use_sandbox_level(sandbox, err)
    settings = load_settings()

    def fail(msg: str) -> None:
        err.print(f"[red]{msg}[/red]", soft_wrap=True, highlight=False)
        raise typer.Exit(2)

    if (output is None) == (resume is None):
        fail("give either -o DIR (a new campaign) or --resume DIR (continue one)")
    try:
        budget_s = parse_budget(budget) if budget is not None else None
    except ValueError as e:
        fail(str(e))
    if executor not in ("local", "ray"):
        fail(f"--executor {executor!r}: use local or ray")
    if workers < 1:
        fail("--workers must be at least 1")
    if not 0.0 <= mutant_share <= 1.0:
        fail("--mutant-share must be between 0 and 1")
    if backward_share is not None and not 0.0 <= backward_share <= 1.0:
        fail("--backward-share must be between 0 and 1")
    if pack is not None and not 1 <= pack <= 16:
        fail("--pack must be between 1 and 16")
    if pack_mutants is not None and not 1 <= pack_mutants <= 16:
        fail("--pack-mutants must be between 1 and 16")
    display = StatusDisplay(console, live=False if plain else None)
    if resume is not None:
        run = Campaign.resume(resume, budget_s=budget_s, display=display,
                              overrides={"min_free_mb": settings.campaign_min_free_mb})
    else:
        if budget_s is None:
            fail("--budget is required for a new campaign (e.g. --budget 8h)")
        reserve_s = min(settings.triage_reserve_s, settings.triage_reserve_share * float(budget_s))
        cfg = CampaignConfig(
            out=str(output), budget_s=float(budget_s), targets=_split(targets), workers=workers, llm=llm,
            seeds=_split(seeds), mutant_share=mutant_share, nodes=nodes, seed=seed, triage=triage,
            triage_budget_s=triage_budget_s, executor=executor, address=address, coverage=coverage,
            timeout_s=float(timeout) if timeout is not None else settings.worker_timeout_s,
            memory_mb=settings.worker_memory_mb, value_search_budget_ms=settings.value_search_budget_ms,
            value_bins=settings.value_bins if value_bins is None else value_bins, gate_check=gate_check,
            backward_share=settings.backward_share if backward_share is None else backward_share,
            pack=settings.pack if pack is None else pack,
            pack_mutants=settings.pack_mutants if pack_mutants is None else pack_mutants,
            min_free_mb=settings.campaign_min_free_mb, report_every_s=report_every,
            triage_per_key=settings.triage_per_key, triage_workers=min(settings.triage_workers, workers),
            triage_max_workers=min(settings.triage_max_workers, workers),
            triage_reserve_s=reserve_s,
            triage_after_s=reserve_s if settings.triage_after_budget_s is None else settings.triage_after_budget_s)
        run = Campaign(cfg, display=display)
    from nnforge.core.settings import describe_sources, env_files

    display.event(describe_sources(env_files()))  # a campaign started elsewhere than its .env says so
    try:
        outcome = run.run()
    except (CampaignSetupError, CampaignLocked) as e:
        fail(str(e))
    except RuntimeError as e:  # e.g. --executor ray without ray installed
        fail(f"the campaign could not start: {e}")
    # soft_wrap: one line each however narrow the terminal or pipe, so paths and the resume command copy whole
    rate = 60.0 * outcome.tests_this_run / outcome.run_s if outcome.run_s > 0 else 0.0
    console.print(f"campaign {outcome.reason}: {outcome.tests_this_run} tests this run ({rate:.1f}/min, "
                  f"{rate / max(run.cfg.workers, 1):.1f}/min per worker), {outcome.tests_total} in all, "
                  f"{outcome.findings} findings, {outcome.clusters} clusters, "
                  f"{outcome.elapsed_s:.0f} s of {run.cfg.budget_s:.0f} s used", highlight=False, soft_wrap=True)
    h = outcome.health
    if h:
        console.print(f"workers: {h.get('restarts', 0)} restarts, {h.get('timeouts', 0)} timeouts, "
                      f"{h.get('segfaults', 0)} segfaults, {h.get('ooms', 0)} ooms", highlight=False, soft_wrap=True)
    for name, path in outcome.files.items():
        console.print(f"{name}: {path}", highlight=False, soft_wrap=True)
    console.print(f"store: {outcome.folder / 'store.sqlite'}; findings: {outcome.folder / 'findings'}",
                  highlight=False, soft_wrap=True)
    if outcome.reason == "interrupted":
        console.print(f"continue with: nnforge campaign --resume {outcome.folder}", highlight=False, soft_wrap=True)
    raise typer.Exit(exit_status(outcome.reason))


def use_sandbox_level(level: str | None, err: Console) -> None:
    """`--sandbox LEVEL`: every worker pool this process makes uses it (through the setting)."""
    import os

    from nnforge.oracle.sandbox import SANDBOX_LEVELS

    if level is None:
        return
    if level not in SANDBOX_LEVELS:
        err.print(f"error: --sandbox must be one of {', '.join(SANDBOX_LEVELS)}, not {level!r}")
        raise typer.Exit(2)
    os.environ["NNFORGE_WORKER_SANDBOX"] = level

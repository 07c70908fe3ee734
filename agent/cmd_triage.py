"""`nnforge triage CAMPAIGN_DIR`: reduce and cluster every new finding, write the drafts.

How findings get in: the campaign loop records them in the store (CAMPAIGN_DIR/store.sqlite);
by hand, `--import CASES_DIR` judges every TestCase folder under CASES_DIR on `--target`
(a folder holding `inputs.pt` and a `verdicts.json` for the target is not rerun) and records
each bug as a finding before anything else happens to it.

For each new finding: reduce it (the reducer keeps the same bug), compute its signature, join
the cluster with the same signature (or a near-identical wrong-output one) or open a new one,
and (re)write `CAMPAIGN_DIR/findings/<cluster_id>/`: `case/` (the representative reduced case:
the smallest one seen), `repro.py`, `report.md`, `gh_command.sh` (never run), `cluster.json`.
A finding whose triage fails stays `new` (with the error noted) and is retried next time.

Exit status: 0 all findings triaged, 1 some failed, 2 bad arguments.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nnforge.agent.cli import app
from nnforge.agent.store import CampaignStore, Cluster, Store, iter_case_folders
from nnforge.core.settings import Settings, load_settings
from nnforge.core.testcase import TestCase
from nnforge.triage.pipeline import (FINDINGS_SUBDIR, REDUCED_SUBDIR, TriageConfig, TriageOutcome, cluster_folder,
                                     triage_finding, write_cluster_folder)

__all__ = ["CASES_SUBDIR", "FINDINGS_SUBDIR", "REDUCED_SUBDIR", "TriageOutcome", "cluster_folder", "import_cases",
           "triage_findings", "write_cluster_folder"]

CASES_SUBDIR = "cases"


# -- getting findings in ------------------------------------------------------------------------------
def import_cases(store: Store, pool: Any, cases_dir: Path, campaign_dir: Path, targets: list[str],
                 settings: Settings, log: Callable[[str], None] = lambda s: None) -> list[int]:
    """Judge every case folder under `cases_dir` on `targets`; record tests and findings.

    Each case is saved (with the values it was judged on) under CAMPAIGN_DIR/cases/<case_id>/,
    and every bug verdict is written to the store as a finding before anything else is done
    with it. Returns the finding ids.
    """
    from nnforge.agent.cmd_reduce import stored_verdict
    from nnforge.oracle.oracle import Oracle

    oracle = Oracle(pool, targets, settings.value_search_budget_ms, timeout_s=settings.worker_timeout_s)
    found: list[int] = []
    for folder in iter_case_folders(cases_dir):
        try:
            case = TestCase.load(folder)
        except Exception as e:
            log(f"skipping {folder}: {type(e).__name__}: {e}")
            continue
        stored = [stored_verdict(folder, t) for t in targets] if case.inputs is not None else [None]
        if all(v is not None for v in stored):
            verdicts = [v for v in stored if v is not None]
        else:
            result = oracle.check(case)
            case, verdicts = result.case, list(result.verdicts)
        dest = campaign_dir / CASES_SUBDIR / case.case_id
        case.save(dest)
        (dest / "verdicts.json").write_text(json.dumps([v.to_json() for v in verdicts], indent=2, default=str))
        origin = str(case.meta.get("origin", "import"))
        for v in verdicts:
            store.add_test(case.case_id, v, folder=dest, origin=origin)
            if v.is_bug:
                found.append(store.add_finding(case.case_id, v, case_folder=dest))
        log(f"{folder}: " + ", ".join(f"{v.target} {v.symptom.value}" for v in verdicts))
    return found


# -- triage -----------------------------------------------------------------------------------------------------
def triage_findings(store: Store, pool: Any, campaign_dir: Path, *, settings: Settings, reduce: bool = True,
                    budget_s: float = 120.0, max_queries: int = 200, threshold: float | None = None,
                    targets: list[str] | None = None, use_llm: bool = True, per_key: int | None = None,
                    verify: bool = True, log: Callable[[str], None] = lambda s: None) -> list[TriageOutcome]:
    """Triage every waiting finding (of `targets`, when given), oldest first: the first findings
    of each provisional key are reduced, the rest attach to their cluster (triage/pipeline.py)."""
    cfg = TriageConfig(reduce=reduce, budget_s=budget_s, max_queries=max_queries, threshold=threshold,
                       use_llm=use_llm, per_key=settings.triage_per_key if per_key is None else per_key,
                       verify=verify)
    outcomes = []
    for finding in store.new_findings():
        if targets and finding.target not in targets:
            continue
        try:
            outcomes.append(triage_finding(store, pool, campaign_dir, finding, settings=settings, cfg=cfg, log=log))
        except Exception as e:  # this finding stays waiting; the next run tries again
            store.mark_failed(finding.finding_id, f"{type(e).__name__}: {e}")
            outcomes.append(TriageOutcome(finding.finding_id, finding.case_id, finding.target,
                                          error=f"{type(e).__name__}: {e}"))
            log(f"finding {finding.finding_id}: triage failed: {type(e).__name__}: {e}")
    if verify:
        verify_unchecked(store, campaign_dir, log=log)
    return outcomes


def verify_unchecked(store: Store, campaign_dir: Path, log: Callable[[str], None] = lambda s: None) -> int:
    """Run the repro of every cluster not checked yet (a campaign that ended mid-check leaves some)."""
    from nnforge.core.verdict import Symptom
    from nnforge.triage.pipeline import MISMATCH_RUNS, verify_repro

    n = 0
    for c in store.clusters():
        repro = cluster_folder(campaign_dir, c.cluster_id) / "repro.py"
        if c.repro_status != "unchecked" or not repro.is_file():
            continue
        symptom = Symptom(c.signature.symptom)
        check = verify_repro(repro, symptom, runs=MISMATCH_RUNS if symptom is Symptom.MISMATCH else 1)
        store.set_repro_status(c.cluster_id, check.status, check.detail)
        log(f"cluster {c.cluster_id}: repro {check.status} ({check.detail})")
        if check.output:  # the report quotes what the script printed
            try:
                write_cluster_folder(store, campaign_dir, store.cluster(c.cluster_id), use_llm=False,
                                     repro_output=check.output)
            except Exception as e:
                log(f"cluster {c.cluster_id}: report not rewritten: {type(e).__name__}: {e}")
        n += 1
    return n


# -- the command ------------------------------------------------------------------------------------------------------
@app.command()
def triage(
    campaign_dir: Path = typer.Argument(..., metavar="CAMPAIGN_DIR",
                                        help="The campaign folder (its store.sqlite is created if missing)."),
    target: str = typer.Option("", "--target", help="Comma-separated targets: what --import runs, and (when given) "
                                                    "the only findings triaged. Default for --import: inductor."),
    import_dir: Optional[Path] = typer.Option(None, "--import", help="Judge every case folder under this folder and "
                                                                       "record each bug as a finding first."),
    budget_s: float = typer.Option(120.0, "--budget-s", help="Time budget per reduction, seconds."),
    max_queries: int = typer.Option(200, "--max-queries", help="Most sandbox checks per reduction."),
    no_reduce: bool = typer.Option(False, "--no-reduce", help="Cluster the findings as found, without reducing them."),
    no_llm: bool = typer.Option(False, "--no-llm", help="Template prose only, even with an LLM configured."),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome as JSON."),
) -> None:
    """Reduce and cluster every new finding; write repro.py, report.md and gh_command.sh per cluster."""
    from nnforge.oracle.backend import parse_target
    from nnforge.oracle.sandbox import WorkerPool

    console = Console(stderr=as_json)
    settings = load_settings()
    targets = [t.strip() for t in target.split(",") if t.strip()]
    try:
        for t in targets:
            parse_target(t)
    except ValueError as e:
        console.print(f"[red]{e}[/red]", soft_wrap=True)
        raise typer.Exit(2)
    if import_dir is not None and not import_dir.is_dir():
        console.print(f"[red]--import {import_dir}: not a folder[/red]")
        raise typer.Exit(2)
    start = time.monotonic()
    with Store(campaign_dir) as store, WorkerPool(size=1, timeout_s=settings.worker_timeout_s,
                                                  memory_mb=settings.worker_memory_mb,
                                                  inductor_cache_dir=settings.inductor_cache_dir) as pool:
        if import_dir is not None:
            ids = import_cases(store, pool, import_dir, campaign_dir, targets or ["inductor"], settings,
                               log=lambda s: console.print(s, soft_wrap=True, markup=False))
            console.print(f"recorded {len(ids)} finding(s) from {import_dir}")
        outcomes = triage_findings(store, pool, campaign_dir, settings=settings, reduce=not no_reduce,
                                   budget_s=budget_s, max_queries=max_queries, targets=targets or None,
                                   use_llm=not no_llm, log=lambda s: console.print(s, soft_wrap=True, markup=False))
        clusters = {c.cluster_id: c for c in store.clusters()}
    if (campaign_dir / "store.sqlite").is_file():
        from nnforge.agent.campaign import write_reports

        with CampaignStore(campaign_dir) as cstore:
            written = write_reports(campaign_dir, cstore, log=lambda s: console.print(s, soft_wrap=True, markup=False))
        if not as_json:
            console.print("rewrote " + ", ".join(written.values()))
    if as_json:
        typer.echo(json.dumps({"outcomes": [o.__dict__ for o in outcomes],
                               "clusters": [{"cluster_id": c.cluster_id, "title": c.title, "count": c.count,
                                             "folder": str(cluster_folder(campaign_dir, c.cluster_id))}
                                            for c in clusters.values()]}, indent=2, default=str))
    else:
        _print_summary(console, campaign_dir, outcomes, clusters, time.monotonic() - start)
    raise typer.Exit(1 if any(o.error for o in outcomes) else 0)


# Below this many columns (an 80-column terminal, a pipe) the triage table puts symptom, target
# and rung under the title instead of in columns of their own, so the title keeps half the width.
WIDE_TABLE_COLUMNS = 120


def summary_table(title: str, touched: list[str], new: set[str], clusters: dict[str, Cluster], width: int) -> Table:
    """The clusters a triage touched, one row each, laid out for a console `width` columns wide:
    short columns never wrap, the cluster title folds and is never cut."""
    table = Table(title=escape(title))
    wide = width >= WIDE_TABLE_COLUMNS
    table.add_column("cluster", no_wrap=True)
    if wide:
        table.add_column("", no_wrap=True)
    table.add_column("findings", no_wrap=True, justify="right")
    if wide:
        for col in ("symptom", "target", "rung"):
            table.add_column(col, no_wrap=True)
    table.add_column("title" if wide else "title / verdict", overflow="fold", ratio=1, min_width=20)
    for cid in touched:
        c = clusters[cid]
        status = "[green]new[/green]" if cid in new else "seen"
        sig = c.signature
        if wide:
            table.add_row(cid, status, str(c.count), sig.symptom, sig.target, sig.rung or "", escape(c.title))
        else:
            verdict = f"[dim]{sig.symptom} on {sig.target}" + (f", rung {sig.rung}" if sig.rung else "") + "[/dim]"
            table.add_row(f"{cid}\n{status}", str(c.count), f"{escape(c.title)}\n{verdict}")
    return table


def _print_summary(console: Console, campaign_dir: Path, outcomes: list[TriageOutcome],
                   clusters: dict[str, Cluster], elapsed: float) -> None:
    if not outcomes:
        console.print("no new findings to triage")
    touched = list(dict.fromkeys(o.cluster_id for o in outcomes if o.cluster_id))
    new = {o.cluster_id for o in outcomes if o.is_new_cluster}
    title = f"triage of {campaign_dir}: {len(outcomes)} finding(s), {len(touched)} cluster(s), {elapsed:.0f} s"
    if touched:
        console.print(summary_table(title, touched, new, clusters, console.width))
    elif outcomes:
        console.print(title, markup=False)
    for o in outcomes:
        if o.error:
            console.print(f"[red]finding {o.finding_id} ({o.case_id}, {o.target}) not triaged: {escape(o.error)}[/red]",
                          soft_wrap=True)
    if touched:
        console.print(f"drafts in {campaign_dir / FINDINGS_SUBDIR}/<cluster>/ (repro.py, report.md, gh_command.sh)",
                      soft_wrap=True)

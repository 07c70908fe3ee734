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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

from nnforge.agent.cli import app
from nnforge.agent.store import Cluster, Finding, Store, iter_case_folders
from nnforge.core.settings import Settings, load_settings
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Verdict

CASES_SUBDIR = "cases"
REDUCED_SUBDIR = "reduced"
FINDINGS_SUBDIR = "findings"


@dataclass(frozen=True)
class TriageOutcome:
    finding_id: int
    case_id: str
    target: str
    cluster_id: str | None = None
    is_new_cluster: bool = False
    how: str = ""  # "digest" | "similar" | "new"
    reduced: dict[str, Any] | None = None  # reduction summary (before/after sizes, queries, seconds)
    error: str | None = None


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
                    targets: list[str] | None = None, use_llm: bool = True,
                    log: Callable[[str], None] = lambda s: None) -> list[TriageOutcome]:
    """Reduce, sign and cluster every new finding (of `targets`, when given); write the drafts."""
    from nnforge.triage.cluster import DEFAULT_THRESHOLD

    outcomes = []
    for finding in store.new_findings():
        if targets and finding.target not in targets:
            continue
        try:
            outcomes.append(_triage_one(store, pool, campaign_dir, finding, settings=settings, reduce=reduce,
                                        budget_s=budget_s, max_queries=max_queries,
                                        threshold=DEFAULT_THRESHOLD if threshold is None else threshold,
                                        use_llm=use_llm, log=log))
        except Exception as e:  # this finding stays `new`; the next run tries again
            store.mark_failed(finding.finding_id, f"{type(e).__name__}: {e}")
            outcomes.append(TriageOutcome(finding.finding_id, finding.case_id, finding.target,
                                          error=f"{type(e).__name__}: {e}"))
            log(f"finding {finding.finding_id}: triage failed: {type(e).__name__}: {e}")
    return outcomes


def _triage_one(store: Store, pool: Any, campaign_dir: Path, finding: Finding, *, settings: Settings, reduce: bool,
                budget_s: float, max_queries: int, threshold: float, use_llm: bool,
                log: Callable[[str], None]) -> TriageOutcome:
    from nnforge.triage.cluster import choose_cluster
    from nnforge.triage.report import issue_title
    from nnforge.triage.signature import signature_of

    if not finding.case_folder:
        raise ValueError(f"finding {finding.finding_id} has no case folder")
    case = TestCase.load(finding.case_folder)
    verdict = finding.verdict
    summary: dict[str, Any] | None = None
    if reduce:
        from nnforge.triage.reducer import Reducer

        reducer = Reducer(pool, finding.target, timeout_s=settings.worker_timeout_s, max_queries=max_queries,
                          time_budget_s=budget_s, value_search_budget_ms=settings.value_search_budget_ms)
        res = reducer.reduce(case, verdict)
        summary = {"before": res.before, "after": res.after, "queries": res.queries,
                   "elapsed_s": round(res.elapsed_s, 2), "verified": res.verified, "exhausted": res.exhausted}
        if res.verified:
            case, verdict = res.case, res.verdict
        log(f"finding {finding.finding_id}: ops {res.before['ops']} → {res.after['ops']}, "
            f"{res.queries} queries, {res.elapsed_s:.1f} s" + ("" if res.verified else " (not verified: kept the input)"))
    reduced_dir = campaign_dir / REDUCED_SUBDIR / str(finding.finding_id)
    case.save(reduced_dir)
    (reduced_dir / "verdict.json").write_text(json.dumps(verdict.to_json(), indent=2, sort_keys=True, default=str))
    if summary is not None:
        (reduced_dir / "reduction.json").write_text(json.dumps(summary, indent=2, default=str))

    signature = signature_of(verdict, case)
    assignment = choose_cluster(signature, store.cluster_records(), threshold=threshold)
    existing = store.cluster(assignment.cluster_id) if not assignment.is_new else None
    representative = existing is None or _smaller_than_representative(store, existing, case)
    cluster = store.assign_cluster(finding.finding_id, assignment.cluster_id, signature,
                                   title=issue_title(verdict, case), reduced_folder=reduced_dir,
                                   representative=representative)
    write_cluster_folder(store, campaign_dir, cluster, settings=settings, use_llm=use_llm)
    return TriageOutcome(finding.finding_id, finding.case_id, finding.target, cluster.cluster_id,
                         assignment.is_new, assignment.how, summary)


def _size(case: TestCase) -> tuple[int, int]:
    from nnforge.triage.reducer import case_size

    s = case_size(case)
    return s["ops"], s["lines"]


def _smaller_than_representative(store: Store, cluster: Cluster, case: TestCase) -> bool:
    rep = store.finding(cluster.representative) if cluster.representative is not None else None
    if rep is None or not rep.reduced_folder or not Path(rep.reduced_folder).is_dir():
        return True
    try:
        return _size(case) < _size(TestCase.load(rep.reduced_folder, with_values=False))
    except Exception:
        return False


# -- the cluster folder -------------------------------------------------------------------------------------------
def cluster_folder(campaign_dir: Path, cluster_id: str) -> Path:
    return campaign_dir / FINDINGS_SUBDIR / cluster_id


def write_cluster_folder(store: Store, campaign_dir: Path, cluster: Cluster, *, settings: Settings | None = None,
                         use_llm: bool = True) -> Path:
    """(Re)write findings/<cluster_id>/ from the cluster's representative reduced case."""
    from nnforge.triage.gh import write_gh_command
    from nnforge.triage.report import draft_report, rewrite_prose, write_report
    from nnforge.triage.repro import write_repro

    rep = store.finding(cluster.representative) if cluster.representative is not None else None
    if rep is None:
        raise ValueError(f"cluster {cluster.cluster_id} has no representative finding")
    source = Path(rep.reduced_folder or rep.case_folder or "")
    case = TestCase.load(source)
    verdict = rep.verdict
    if (source / "verdict.json").is_file():
        verdict = Verdict.from_json(json.loads((source / "verdict.json").read_text()))
    reduction = None
    if (source / "reduction.json").is_file():
        reduction = json.loads((source / "reduction.json").read_text())
    folder = cluster_folder(campaign_dir, cluster.cluster_id)
    folder.mkdir(parents=True, exist_ok=True)
    case.save(folder / "case")
    (folder / "case" / "verdict.json").write_text(json.dumps(verdict.to_json(), indent=2, sort_keys=True, default=str))
    repro = write_repro(case, verdict, title=cluster.title)
    (folder / "repro.py").write_text(repro)
    draft = draft_report(case, verdict, repro=repro, signature=cluster.signature, cluster_id=cluster.cluster_id,
                         count=cluster.count, reduction=reduction)
    if use_llm:
        draft = rewrite_prose(draft, settings)
    write_report(folder, draft)
    write_gh_command(folder, draft.title, draft.labels, repo=draft.repo)
    members = [f.finding_id for f in store.cluster_findings(cluster.cluster_id)]
    (folder / "cluster.json").write_text(json.dumps({
        "cluster_id": cluster.cluster_id, "title": draft.title, "count": cluster.count, "findings": members,
        "representative": cluster.representative, "signature": cluster.signature.to_json(),
        "report": draft.to_json(), "first_seen": cluster.first_seen, "last_seen": cluster.last_seen,
    }, indent=2, default=str))
    return folder


# -- the command ------------------------------------------------------------------------------------------------------
@app.command()
def triage(
    campaign_dir: Path = typer.Argument(..., help="The campaign folder (its store.sqlite is created if missing)."),
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
    if as_json:
        typer.echo(json.dumps({"outcomes": [o.__dict__ for o in outcomes],
                               "clusters": [{"cluster_id": c.cluster_id, "title": c.title, "count": c.count,
                                             "folder": str(cluster_folder(campaign_dir, c.cluster_id))}
                                            for c in clusters.values()]}, indent=2, default=str))
    else:
        _print_summary(console, campaign_dir, outcomes, clusters, time.monotonic() - start)
    raise typer.Exit(1 if any(o.error for o in outcomes) else 0)


def _print_summary(console: Console, campaign_dir: Path, outcomes: list[TriageOutcome],
                   clusters: dict[str, Cluster], elapsed: float) -> None:
    if not outcomes:
        console.print("no new findings to triage")
    touched = list(dict.fromkeys(o.cluster_id for o in outcomes if o.cluster_id))
    new = {o.cluster_id for o in outcomes if o.is_new_cluster}
    table = Table(title=f"triage of {campaign_dir}: {len(outcomes)} finding(s), {len(touched)} cluster(s), {elapsed:.0f} s")
    for col in ("cluster", "", "findings", "symptom", "target", "rung"):
        table.add_column(col, no_wrap=True)
    table.add_column("title", overflow="fold", min_width=30)
    for cid in touched:
        c = clusters[cid]
        table.add_row(cid, "[green]new[/green]" if cid in new else "seen", str(c.count), c.signature.symptom,
                      c.signature.target, c.signature.rung or "", c.title)
    console.print(table)
    for o in outcomes:
        if o.error:
            console.print(f"[red]finding {o.finding_id} ({o.case_id}, {o.target}) not triaged: {o.error}[/red]",
                          soft_wrap=True)
    if touched:
        console.print(f"drafts in {campaign_dir / FINDINGS_SUBDIR}/<cluster>/ (repro.py, report.md, gh_command.sh)")

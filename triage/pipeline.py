"""The triage pipeline: one entry point that takes a finding and the cluster book and says what
happened to it. `nnforge triage` and the campaign's triage thread both call `triage_finding`.

For each finding, in this order:

1. Its provisional key (`rootcause.provisional_key`, stored when the finding was recorded).
   When `per_key` findings of that key are already reduced and all reached one cluster, the
   finding is attached to that cluster unreduced (a bug hit a thousand times costs `per_key`
   reductions). When they reached different clusters, the key was too coarse and this finding
   is reduced like the first ones.
2. Reduction (the reducer keeps the same bug), the final signature on the reduced case, and the
   cluster it belongs to (`cluster.choose_cluster`).
3. The cluster folder `findings/<cluster>/` (case/, repro.py, report.md, gh_command.sh,
   cluster.json), then the repro check: `repro.py` runs in a fresh process with a clean
   environment (three times for wrong results) and the cluster is listed as a bug only if it
   exited 1 every time; otherwise it is listed apart as unreproduced, with the exit codes.

The book is anything with the agent Store's methods (finding, cluster, cluster_records,
assign_cluster, attach, key_members, cluster_findings, set_repro_status); the triage stage never
imports the agent.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from nnforge.core.settings import Settings
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom, Verdict

REDUCED_SUBDIR = "reduced"
FINDINGS_SUBDIR = "findings"
KNOWN_GUILTY = "known guilty operator"  # attached unreduced: a listed cluster's ATen operator is wrong alone in it
REPRO_OUTPUT_FILE = "repro_output.txt"  # what repro.py printed when triage saw it reproduce
REPRO_OUTPUT_LINES = 30
REPRO_TIMEOUT_S = 300.0
REPRO_MEMORY_MB = 8192
MISMATCH_RUNS = 3  # a wrong result must show in every one of this many fresh runs


@dataclass(frozen=True)
class TriageConfig:
    reduce: bool = True
    budget_s: float = 60.0  # per reduction
    max_queries: int = 60
    threshold: float | None = None  # similarity threshold (None: cluster.DEFAULT_THRESHOLD)
    use_llm: bool = False
    per_key: int = 2  # findings of one provisional key that are reduced before the rest attach
    verify: bool = True  # run repro.py in a fresh process after writing it
    verify_runs_mismatch: int = MISMATCH_RUNS


@dataclass(frozen=True)
class TriageOutcome:
    finding_id: int
    case_id: str
    target: str
    cluster_id: str | None = None
    is_new_cluster: bool = False
    how: str = ""  # "digest" | "similar" | "new" | "attached" | KNOWN_GUILTY
    reduced: dict[str, Any] | None = None  # reduction summary (before/after sizes, queries, seconds)
    error: str | None = None
    repro: str | None = None  # the cluster's repro status after this finding, when checked


@dataclass(frozen=True)
class ReproCheck:
    status: str  # "reproduced" | "unreproduced"
    exit_codes: tuple[int, ...] = ()
    detail: str = ""
    output: str = ""  # the "BUG PRESENT" part of the script's output, when it reproduced


# -- the entry point ----------------------------------------------------------------------------------------
def triage_finding(book: Any, pool: Any, campaign_dir: Path, finding: Any, *, settings: Settings,
                   cfg: TriageConfig = TriageConfig(), log: Callable[[str], None] = lambda s: None) -> TriageOutcome:
    """Triage one finding (see the module docstring). Raises when the finding cannot be read;
    the caller records the error and the finding stays waiting."""
    if not finding.case_folder:
        raise ValueError(f"finding {finding.finding_id} has no case folder")
    pkey = finding.pkey or ensure_pkey(book, finding)
    target_cluster, how = attach_target(book, finding, pkey, cfg.per_key), "attached"
    if target_cluster is None and cfg.reduce:
        target_cluster, how = known_bug_of(book, pool, finding, settings=settings), KNOWN_GUILTY
        if target_cluster is not None:
            log(f"finding {finding.finding_id}: a known guilty operator is wrong alone in it: "
                f"attached to {target_cluster} unreduced")
    if target_cluster is not None:
        cluster = book.attach(finding.finding_id, target_cluster)
        update_members(book, campaign_dir, cluster)
        return TriageOutcome(finding.finding_id, finding.case_id, finding.target, cluster.cluster_id, False, how,
                             repro=cluster.repro_status)
    return reduce_and_cluster(book, pool, campaign_dir, finding, settings=settings, cfg=cfg, log=log)


def known_bug_of(book: Any, pool: Any, finding: Any, *, settings: Settings) -> str | None:
    """The listed wrong-value cluster whose guilty ATen operator is wrong alone in this unreduced
    finding (triage/guilty.py `known_guilty_cluster`), or None."""
    from nnforge.triage.guilty import known_guilty_cluster
    from nnforge.triage.signature import FIRST_WRONG

    known: list[tuple[str, str]] = []
    for c in book.clusters():
        sig = c.signature
        if c.repro_status != "reproduced" or sig.target != finding.target or not sig.key.startswith(FIRST_WRONG):
            continue
        ops = json.loads(sig.key)[1]
        if len(ops) == 1 and str(ops[0]).startswith("aten."):
            known.append((c.cluster_id, str(ops[0])))
    if not known:
        return None
    return known_guilty_cluster(pool, TestCase.load(finding.case_folder), finding.verdict, known, settings=settings)


def ensure_pkey(book: Any, finding: Any) -> str:
    """A finding recorded before provisional keys existed gets one now."""
    from nnforge.triage.rootcause import provisional_key

    key = provisional_key(finding.verdict, TestCase.load(finding.case_folder, with_values=False))
    book.set_pkey(finding.finding_id, key)
    return key


def attach_target(book: Any, finding: Any, pkey: str, per_key: int) -> str | None:
    """The cluster this finding joins unreduced, or None when it must be reduced itself."""
    reduced = [f for f in book.key_members(pkey)
               if f.status == "triaged" and f.finding_id != finding.finding_id and f.signature_digest]
    if len(reduced) < per_key:
        return None
    clusters = {f.signature_digest for f in reduced}
    return next(iter(clusters)) if len(clusters) == 1 else None


def reduce_and_cluster(book: Any, pool: Any, campaign_dir: Path, finding: Any, *, settings: Settings,
                       cfg: TriageConfig, log: Callable[[str], None]) -> TriageOutcome:
    from nnforge.triage.cluster import DEFAULT_THRESHOLD, choose_cluster
    from nnforge.triage.report import issue_title
    from nnforge.triage.signature import signature_of

    case = TestCase.load(finding.case_folder)
    verdict = finding.verdict
    summary: dict[str, Any] | None = None
    if cfg.reduce:
        from nnforge.triage.reducer import Reducer, describe_reduction

        reducer = Reducer(pool, finding.target, timeout_s=settings.worker_timeout_s, max_queries=cfg.max_queries,
                          time_budget_s=cfg.budget_s, value_search_budget_ms=settings.value_search_budget_ms)
        res = reducer.reduce(case, verdict)
        summary = {"before": res.before, "after": res.after, "queries": res.queries,
                   "elapsed_s": round(res.elapsed_s, 2), "verified": res.verified, "exhausted": res.exhausted}
        if res.verified:
            case, verdict = res.case, res.verdict
        log(f"finding {finding.finding_id}: {describe_reduction(res.before, res.after)}, "
            f"{res.queries} queries, {res.elapsed_s:.1f} s" + ("" if res.verified else " (not verified: kept the input)"))
        from nnforge.triage.value_need import needs_its_values

        needed = needs_its_values(pool, case, verdict, timeout_s=settings.worker_timeout_s,
                                  value_search_budget_ms=settings.value_search_budget_ms)
        if needed is not None:
            summary["values_needed"] = needed
    from nnforge.triage.guilty import guilty_verdict, wrong_before_crash

    upstream = wrong_before_crash(pool, case, verdict, settings=settings)
    if upstream is not None:
        crash = verdict
        case, verdict = upstream
        log(f"finding {finding.finding_id}: its crash follows a wrong value ({verdict.symptom.value}): "
            f"keyed by that")
        if summary is not None:
            summary["upstream_of"] = {"symptom": crash.symptom.value, "exc_type": crash.exc_type,
                                      "message": (crash.exc_message or "")[:300]}
    verdict = guilty_verdict(pool, case, verdict, settings=settings)
    reduced_dir = campaign_dir / REDUCED_SUBDIR / str(finding.finding_id)
    case.save(reduced_dir)
    (reduced_dir / "verdict.json").write_text(json.dumps(verdict.to_json(), indent=2, sort_keys=True, default=str))
    if summary is not None:
        (reduced_dir / "reduction.json").write_text(json.dumps(summary, indent=2, default=str))

    signature = signature_of(verdict, case)
    threshold = DEFAULT_THRESHOLD if cfg.threshold is None else cfg.threshold
    assignment = choose_cluster(signature, book.cluster_records(), threshold=threshold)
    title = issue_title(verdict, case, signature=signature)
    advice = None
    if assignment.is_new and cfg.use_llm:  # only what the structural key could not place goes to the model
        advice = llm_advice(book, settings, verdict, case, signature, title)
        if advice is not None and advice.duplicate_of:
            from nnforge.triage.cluster import Assignment

            assignment = Assignment(advice.duplicate_of, False, "llm")
            log(f"finding {finding.finding_id}: the triage LLM merged it into {advice.duplicate_of} (same rung and symptom)")
    existing = book.cluster(assignment.cluster_id) if not assignment.is_new else None
    representative = existing is None or smaller_than_representative(book, existing, case)
    cluster = book.assign_cluster(finding.finding_id, assignment.cluster_id, signature, title=title,
                                  reduced_folder=reduced_dir, representative=representative)
    if assignment.is_new and advice is not None and (advice.title or advice.hypothesis):
        book.set_cluster_note(cluster.cluster_id, llm_title=advice.title, hypothesis=advice.hypothesis,
                              model=advice.model)
        cluster = book.cluster(cluster.cluster_id)
    check_now = cfg.verify and (representative or cluster.repro_status == "unchecked")
    folder = write_cluster_folder(book, campaign_dir, cluster, settings=settings, use_llm=cfg.use_llm and not check_now)
    repro_status = cluster.repro_status
    if check_now:
        check = verify_repro(folder / "repro.py", verdict.symptom,
                             runs=cfg.verify_runs_mismatch if verdict.symptom is Symptom.MISMATCH else 1)
        book.set_repro_status(cluster.cluster_id, check.status, check.detail)
        repro_status = check.status
        log(f"cluster {cluster.cluster_id}: repro {check.status} ({check.detail})")
        # the report quotes what the script printed (expected vs actual, with numbers)
        write_cluster_folder(book, campaign_dir, cluster, settings=settings, use_llm=cfg.use_llm,
                             repro_output=check.output or None)
    return TriageOutcome(finding.finding_id, finding.case_id, finding.target, cluster.cluster_id,
                         assignment.is_new, assignment.how, summary, repro=repro_status)


def llm_advice(book: Any, settings: Settings, verdict: Verdict, case: TestCase, signature: Any,
               title: str) -> Any:
    """The triage LLM's checked advice on a new cluster, or None (offline, or no usable reply)."""
    from nnforge.core.llm import LLMClient
    from nnforge.triage.llm_triage import advise
    from nnforge.triage.rootcause import crash_message, describe_state_change

    try:
        client = LLMClient.from_settings(settings)
    except Exception:
        return None
    if client is None:
        return None
    error = crash_message(verdict) if verdict.exc_type or verdict.exc_message else ""
    change = describe_state_change(case, verdict) if verdict.stateful else ""
    new = {"symptom": verdict.symptom.value, "guilty_layer": verdict.rung, "target": verdict.target,
           "error": error, "state_change": change, "key": signature.key, "draft_title": title,
           "program": case.program}
    source = "\n".join([title, error, change, str(signature.key), case.program, verdict.exc_message or ""])
    return advise(client, new=new, signature=signature, clusters=book.clusters(), template_title=title, source=source)


def case_size(case: TestCase) -> tuple[int, int]:
    from nnforge.triage.reducer import case_size as sizes

    s = sizes(case)
    return s["ops"], s["lines"]


def smaller_than_representative(book: Any, cluster: Any, case: TestCase) -> bool:
    rep = book.finding(cluster.representative) if cluster.representative is not None else None
    if rep is None or not rep.reduced_folder or not Path(rep.reduced_folder).is_dir():
        return True
    try:
        return case_size(case) < case_size(TestCase.load(rep.reduced_folder, with_values=False))
    except Exception:
        return False


# -- the cluster folder -------------------------------------------------------------------------------------
def cluster_folder(campaign_dir: Path, cluster_id: str) -> Path:
    return campaign_dir / FINDINGS_SUBDIR / cluster_id


def write_cluster_folder(book: Any, campaign_dir: Path, cluster: Any, *, settings: Settings | None = None,
                         use_llm: bool = True, repro_output: str | None = None) -> Path:
    """(Re)write findings/<cluster_id>/ from the cluster's representative reduced case.

    `repro_output`: what the repro printed when triage ran it; without it, the output saved
    before is quoted as long as repro.py is the same script, and dropped once it changed."""
    from nnforge.triage.gh import write_gh_command
    from nnforge.triage.report import draft_report, rewrite_prose, write_report
    from nnforge.triage.repro import write_repro

    rep = book.finding(cluster.representative) if cluster.representative is not None else None
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
    output_file = folder / REPRO_OUTPUT_FILE
    if repro_output is not None:
        output_file.write_text(repro_output)
    elif output_file.is_file() and (folder / "repro.py").is_file() and (folder / "repro.py").read_text() == repro:
        repro_output = output_file.read_text()
    else:
        output_file.unlink(missing_ok=True)
    (folder / "repro.py").write_text(repro)
    draft = draft_report(case, verdict, repro=repro, signature=cluster.signature, cluster_id=cluster.cluster_id,
                         count=cluster.count, reduction=reduction, repro_output=repro_output,
                         llm_title=getattr(cluster, "llm_title", None), hypothesis=getattr(cluster, "hypothesis", None),
                         llm_model=getattr(cluster, "llm_model", None))
    if use_llm:
        draft = rewrite_prose(draft, settings)
    write_report(folder, draft)
    write_gh_command(folder, draft.title, draft.labels, repo=draft.repo)
    members = [f.finding_id for f in book.cluster_findings(cluster.cluster_id)]
    (folder / "cluster.json").write_text(json.dumps({
        "cluster_id": cluster.cluster_id, "title": draft.title, "count": cluster.count, "findings": members,
        "representative": cluster.representative, "signature": cluster.signature.to_json(),
        "report": draft.to_json(), "first_seen": cluster.first_seen, "last_seen": cluster.last_seen,
    }, indent=2, default=str))
    return folder


def update_members(book: Any, campaign_dir: Path, cluster: Any) -> None:
    """Keep cluster.json's count and member list current when a finding attaches (cheap: no
    report or repro is rewritten)."""
    path = cluster_folder(campaign_dir, cluster.cluster_id) / "cluster.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    data["count"] = cluster.count
    data["findings"] = [f.finding_id for f in book.cluster_findings(cluster.cluster_id)]
    data["last_seen"] = cluster.last_seen
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


# -- the repro check -----------------------------------------------------------------------------------------
def repro_environment() -> dict[str, str]:
    """What a maintainer's shell would hold: no secrets, no NNForge settings."""
    from nnforge.oracle.sandbox import scrubbed_environ

    return {k: v for k, v in scrubbed_environ().items() if not k.startswith("NNFORGE_")}


def run_repro_once(repro: Path, timeout_s: float = REPRO_TIMEOUT_S) -> tuple[int, str]:
    """`python repro.py` in a fresh confined process (oracle/sandbox.py `run_confined`: its own
    empty dir and empty compile cache, no network, its own pid namespace, the unprivileged uid, a
    memory limit; a maintainer's clean environment): (exit code, output tail)."""
    from nnforge.oracle.sandbox import run_confined

    run = run_confined(Path(repro).resolve(), timeout_s=timeout_s, memory_mb=REPRO_MEMORY_MB,
                       env=repro_environment(), protect=(str(Path(repro).resolve().parent),))
    if run.timed_out:
        return 124, "timed out"
    if run.over_memory:
        return 137, f"the repro's processes held more than {REPRO_MEMORY_MB} MB"
    return run.returncode, run.output[-2000:]


def bug_output(output: str) -> str:
    """The part of a repro's output that shows the bug: from its "BUG PRESENT" line on."""
    lines = output.strip().splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("BUG PRESENT")), None)
    if start is None:
        return ""
    return "\n".join(lines[start:start + REPRO_OUTPUT_LINES])


def verify_repro(repro: Path, symptom: Symptom, runs: int = 1) -> ReproCheck:
    """Reproduced only when every run exits 1 (the script's "bug present")."""
    codes: list[int] = []
    tail = ""
    for _ in range(max(runs, 1)):
        code, tail = run_repro_once(repro)
        codes.append(code)
        if code != 1:
            break
    if all(c == 1 for c in codes):
        return ReproCheck("reproduced", tuple(codes), f"exit 1 in {len(codes)} fresh run(s)", bug_output(tail))
    last = [ln for ln in tail.strip().splitlines() if ln.strip()][-1:] or [""]
    meaning = {0: "the script saw no bug", 2: "the script could not tell", 124: "the script timed out"}
    why = meaning.get(codes[-1], f"exit {codes[-1]}")
    return ReproCheck("unreproduced", tuple(codes), f"{why} (exit codes {list(codes)}): {last[0][:300]}")

"""`nnforge history mine` / `nnforge history ingest`: seeds from a compiler's past bugs.

    nnforge history mine --repo ~/src/pytorch --since 2024-01-01 --paths test/inductor test/dynamo -o seeds/
    nnforge history ingest issues.json -o seeds/

`mine` walks the git history for bug-fix commits and turns the regression tests they add into
TestCases; `ingest` does the same for the code blocks of an issue-tracker export and keeps reports
without runnable code as text seeds. Every candidate runs in eager in a sandbox worker first
(`mutators/validate.py`); only those that run are written. The folder layout, and how a campaign
reads it, is in `generator/history_seeds.py`.

Exit status: 0 the run finished (see the summary for what it found), 2 bad arguments: a path that
is not a git repository, an issues file that is missing or not JSON, an output folder that cannot
be made. A malformed issue or a test that cannot be converted is counted, never fatal.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nnforge.agent.cli import app
from nnforge.core.settings import load_settings
from nnforge.generator.history_category import CategoryGuess
from nnforge.generator.history_git import (NotAGitRepo, ScanStats, SeedCandidate, candidates_from_commit,
                                           commit_category, open_repo, scan_history)
from nnforge.generator.history_issues import (IssuesFileError, candidates_from_issue, issue_category,
                                              load_issues, text_seed)
from nnforge.generator.history_llm import HistoryLLM
from nnforge.generator.history_seeds import TEXT_SEEDS_FILE, write_summary
from nnforge.mutators.validate import EagerCheck, check_case

history_app = typer.Typer(name="history", no_args_is_help=True, add_completion=False,
                          help="Seeds from a compiler's past bugs: git history (mine) and issue exports (ingest).")
app.add_typer(history_app, name="history")

MAX_LISTED_ERRORS = 2000
LOG_SUBJECT_CHARS = 70  # a commit subject or issue title in the log: one line with the rest of the entry
Call = Callable[..., Any]
_PR_REF = re.compile(r"\s*\(#\d+\)$")  # GitHub's squash-merge subjects end in "(#12345)"


def clip(text: str, width: int = LOG_SUBJECT_CHARS) -> str:
    """`text` on one line in at most `width` characters: cut after a whole word, marked "…", and a
    closing PR reference "(#12345)" kept whole, since it is what a reader looks the change up by."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    ref = _PR_REF.search(text)
    tail = " " + ref.group(0).strip() if ref and width - len(ref.group(0)) > 10 else ""
    head = text[: ref.start()] if tail else text
    room = width - len(tail) - 1  # what is left for words, after the "…"
    cut = head[:room] if head[room:room + 1] == " " else head[:room].rsplit(" ", 1)[0]
    return (cut or head[:room]).rstrip() + "…" + tail


# -- validation ---------------------------------------------------------------------------------------------------
class _Validator:
    """Runs candidates in eager on a pool (in parallel, while the caller goes on scanning).

    A candidate whose program equals an earlier one's is not run again: it shares that run's
    result and names the earlier seed (`dup_of`), so it is counted but not written twice.
    """

    def __init__(self, call: Optional[Call], workers: int, timeout_s: Optional[float]):
        self.call = call
        self.timeout_s = timeout_s
        self.executor = ThreadPoolExecutor(max_workers=max(1, workers)) if call is not None else None
        self.pending: list[tuple[SeedCandidate, Future | None, str | None]] = []
        self.first: dict[str, tuple[str, Future | None]] = {}  # case_id -> (seed_id, its run)
        self.duplicates = 0

    def submit(self, cand: SeedCandidate) -> None:
        assert cand.case is not None
        key = cand.case.case_id
        if key in self.first:
            self.duplicates += 1
            seed_id, fut = self.first[key]
            self.pending.append((cand, fut, seed_id))
            return
        fut = self.executor.submit(check_case, self.call, cand.case, 0, self.timeout_s) if self.executor else None
        self.first[key] = (cand.seed_id, fut)
        self.pending.append((cand, fut, None))

    def results(self) -> list[tuple[SeedCandidate, EagerCheck | None, str | None]]:
        """(candidate, its eager check or None when not validating, the seed it duplicates or None)."""
        out = [(c, f.result() if f is not None else None, dup) for c, f, dup in self.pending]
        if self.executor:
            self.executor.shutdown()
        return out


def _write_seed(out_dir: Path, cand: SeedCandidate, check: EagerCheck | None) -> Path:
    assert cand.case is not None
    meta = dict(cand.case.meta)
    meta["validated"] = check is not None
    return cand.case.with_(meta=meta).save(out_dir / cand.seed_id)


def _error(errors: list[dict[str, Any]], item: str, stage: str, error: str) -> None:
    if len(errors) < MAX_LISTED_ERRORS:
        errors.append({"item": item, "stage": stage, "error": error[:500]})


def _llm_for(use_llm: bool, console: Console) -> HistoryLLM | None:
    if not use_llm:
        return None
    llm = HistoryLLM.from_settings(load_settings(), on_note=lambda m: console.print(f"[yellow]{m}[/yellow]"))
    if llm is None:
        console.print("[dim]no LLM configured (NNFORGE_LLM_PROVIDER=none): rule-based extraction and categories only[/dim]")
    return llm


# -- mining git history -------------------------------------------------------------------------------------------
def mine_history(repo: str, out_dir: Path, *, since: Optional[str] = None, paths: tuple[str, ...] = (),
                 rev: str = "HEAD", max_commits: Optional[int] = None, call: Optional[Call] = None,
                 workers: int = 1, timeout_s: Optional[float] = None, llm: HistoryLLM | None = None,
                 log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Scan, extract, validate (through `call`, a WorkerPool's `call`; None: write unvalidated), write.

    Returns the summary also written to DIR/history_summary.json ("git" section). Raises
    NotAGitRepo for a path that is not a repository.
    """
    open_repo(repo)  # fail before creating anything
    out_dir.mkdir(parents=True, exist_ok=True)
    stats = ScanStats()
    validator = _Validator(call, workers, timeout_s)
    errors: list[dict[str, Any]] = []
    fix_rows: list[dict[str, Any]] = []
    categories: Counter[str] = Counter()
    tests_added = extracted = extract_failed = 0
    patterns: Counter[str] = Counter()
    for scan in scan_history(repo, since=since, paths=paths, rev=rev, max_commits=max_commits, stats=stats):
        if stats.scanned % 500 == 0:
            log(f"[dim]{stats.scanned} commits scanned, {stats.fix_commits} fixes[/dim]")
        if not scan.is_fix:
            continue
        for change in scan.test_changes:
            if change.error:
                _error(errors, f"{scan.sha[:12]}:{change.path}", "parse", change.error)
        cands = candidates_from_commit(scan, llm) if scan.added_tests else []
        tests_added += len(scan.added_tests)
        ok = [c for c in cands if c.ok]
        extracted += len(ok)
        extract_failed += len(cands) - len(ok)
        for c in cands:
            if c.ok:
                patterns[c.case.meta["extraction"]] += 1
                validator.submit(c)
            else:
                _error(errors, f"{scan.sha[:12]}:{c.seed_id}", "extract", c.error)
        guess = ok[0].case.meta["category"] if ok else commit_category(scan).category
        categories[guess] += 1
        fix_rows.append({"sha": scan.sha, "summary": scan.summary, "reasons": list(scan.fix_reasons),
                         "tests_added": [f"{p}::{n}" for p, n in scan.added_tests],
                         "extracted": [c.seed_id for c in ok], "category": guess, "seeds": []})
        added = f", {len(scan.added_tests)} test(s) added, {len(ok)} extracted" if scan.added_tests else ""
        log(f"{scan.sha[:10]} [bold]fix[/bold] ({escape(guess)}) {escape(clip(scan.summary))}{added}")

    results = validator.results()
    by_sha = {row["sha"]: row for row in fix_rows}
    valid = invalid = 0
    seed_categories: Counter[str] = Counter()
    for cand, check, dup_of in results:
        if check is not None and not check.ok:
            if dup_of is None:
                invalid += 1
                _error(errors, cand.seed_id, "eager", f"{check.stage}: {check.error}")
            continue
        if dup_of is not None:  # the same program as an earlier seed: the fix still has a runnable seed
            by_sha[cand.case.meta["commit"]]["seeds"].append(dup_of)
            continue
        _write_seed(out_dir, cand, check)
        valid += 1
        seed_categories[cand.case.meta["category"]] += 1
        by_sha[cand.case.meta["commit"]]["seeds"].append(cand.seed_id)
    with_seed = sum(1 for row in fix_rows if row["seeds"])
    summary = {
        "repo": str(Path(repo).resolve()), "rev": rev, "since": since, "paths": list(paths),
        "validated": call is not None, "llm": _llm_state(llm),
        "scanned": stats.scanned, "fix_commits": stats.fix_commits, "fix_commits_with_tests": stats.with_tests,
        "tests_added": tests_added, "extracted": extracted, "extraction_failed": extract_failed,
        "duplicates": validator.duplicates, "valid": valid, "invalid": invalid,
        "fix_commits_with_seed": with_seed,
        "seed_fraction": round(with_seed / stats.fix_commits, 4) if stats.fix_commits else 0.0,
        "elapsed_s": round(stats.elapsed_s, 3),
        "commits_per_s": round(stats.scanned / stats.elapsed_s, 1) if stats.elapsed_s > 0 else 0.0,
        "categories": dict(sorted(categories.items())), "seed_categories": dict(sorted(seed_categories.items())),
        "extraction_patterns": dict(sorted(patterns.items())),
        "scan_errors": stats.errors[:MAX_LISTED_ERRORS], "errors": errors, "fix_commit_list": fix_rows,
    }
    write_summary(out_dir, "git", summary)
    return summary


# -- ingesting bug reports ----------------------------------------------------------------------------------------
def ingest_issues(issues_file: Path, out_dir: Path, *, call: Optional[Call] = None, workers: int = 1,
                  timeout_s: Optional[float] = None, llm: HistoryLLM | None = None,
                  log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Load, extract, validate, write seeds and text seeds. Raises IssuesFileError for an unreadable file."""
    issues, item_errors = load_issues(issues_file)
    out_dir.mkdir(parents=True, exist_ok=True)
    validator = _Validator(call, workers, timeout_s)
    errors: list[dict[str, Any]] = [{"item": f"item {e.index}" + (f" (#{e.number})" if e.number is not None else ""),
                                     "stage": "parse", "error": e.error} for e in item_errors]
    for e in item_errors:
        log(f"[yellow]item {e.index}: {e.error}[/yellow]")
    by_issue: dict[int, list[SeedCandidate]] = {}
    guesses: dict[int, Any] = {}
    with_code = blocks = extracted = extract_failed = 0
    for issue in issues:
        cands = candidates_from_issue(issue, llm)
        by_issue[issue.number] = cands
        if cands:
            with_code += 1
        blocks += len(cands)
        for c in cands:
            if c.ok:
                extracted += 1
                validator.submit(c)
            else:
                extract_failed += 1
                _error(errors, f"#{issue.number} block {c.seed_id.rsplit('-', 1)[-1]}", "extract", c.error)
        ok = [c for c in cands if c.ok]
        guesses[issue.number] = None if not ok else ok[0].case.meta
    results = validator.results()
    outcome: dict[str, list[str]] = {}
    valid = invalid = 0
    seed_categories: Counter[str] = Counter()
    for cand, check, dup_of in results:
        number = cand.case.meta["issue"]
        if check is not None and not check.ok:
            if dup_of is None:
                invalid += 1
                _error(errors, f"#{number} {cand.seed_id}", "eager", f"{check.stage}: {check.error}")
            outcome.setdefault(number, []).append(f"code did not run in eager ({check.stage}: {check.error[:200]})")
            continue
        if dup_of is None:
            _write_seed(out_dir, cand, check)
            valid += 1
            seed_categories[cand.case.meta["category"]] += 1
        outcome.setdefault(number, []).insert(0, "")  # "" marks a runnable seed (perhaps shared with another report)
    categories: Counter[str] = Counter()
    text_lines = []
    for issue in issues:
        reasons = outcome.get(issue.number, [])
        meta = guesses.get(issue.number)
        category = meta["category"] if meta else issue_category(issue, llm=llm).category
        categories[category] += 1
        if "" in reasons:
            log(f"#{issue.number} ({escape(category)}) {escape(clip(issue.title))}: seed written")
            continue
        cands = by_issue.get(issue.number, [])
        if not cands:
            why = "no code block"
        elif reasons:
            why = reasons[0]
        else:
            why = "code could not be converted: " + "; ".join(c.error for c in cands if not c.ok)[:300]
        text_lines.append(text_seed(issue, why, _guess_from(meta) if meta else None))
        log(f"#{issue.number} ({escape(category)}) {escape(clip(issue.title))}: text seed ({escape(clip(why, 80))})")
    _write_text_seeds(out_dir, text_lines)
    summary = {
        "file": str(issues_file.resolve()), "validated": call is not None, "llm": _llm_state(llm),
        "items": len(issues) + len(item_errors), "issues": len(issues), "malformed": len(item_errors),
        "with_code": with_code, "code_blocks": blocks, "extracted": extracted, "extraction_failed": extract_failed,
        "duplicates": validator.duplicates, "valid": valid, "invalid": invalid, "text_seeds": len(text_lines),
        "categories": dict(sorted(categories.items())), "seed_categories": dict(sorted(seed_categories.items())),
        "errors": errors,
    }
    write_summary(out_dir, "issues", summary)
    return summary


def _guess_from(meta: dict[str, Any]) -> CategoryGuess:
    return CategoryGuess(meta["category"], meta.get("category_reason", ""), meta.get("category_source", "rules"))


def _write_text_seeds(out_dir: Path, lines: list[dict[str, Any]]) -> None:
    path = out_dir / TEXT_SEEDS_FILE
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, sort_keys=True) + "\n")


def _llm_state(llm: HistoryLLM | None) -> str:
    if llm is None:
        return "none"
    return f"unavailable: {llm.down_reason}" if llm.down_reason else "used"


# -- the commands -------------------------------------------------------------------------------------------------
def _pool(workers: int, timeout: Optional[float]):
    from nnforge.oracle.sandbox import WorkerPool

    settings = load_settings()
    timeout_s = float(timeout) if timeout is not None else settings.worker_timeout_s
    return WorkerPool(size=max(1, workers), timeout_s=timeout_s, memory_mb=settings.worker_memory_mb,
                      inductor_cache_dir=settings.inductor_cache_dir), timeout_s


def _show(console: Console, title: str, summary: dict[str, Any], keys: list[str]) -> None:
    table = Table(title=title, show_header=False)
    for k in keys:
        table.add_row(k, str(summary.get(k)))
    cats = summary.get("categories", {})
    if cats:
        total = sum(cats.values())
        table.add_row("categories", ", ".join(f"{c} {n} ({n / total:.0%})" for c, n in
                                              sorted(cats.items(), key=lambda kv: (-kv[1], kv[0]))))
    console.print(table)


@history_app.command("mine")
def mine(
    repo: Path = typer.Option(..., "--repo", help="A git checkout of the compiler (e.g. PyTorch)."),
    output: Path = typer.Option(..., "-o", "--output", help="Folder for the seeds (history:DIR in a campaign)."),
    since: Optional[str] = typer.Option(None, "--since", help="Only commits after this date (git syntax: 2024-01-01, '6 months ago')."),
    paths: list[str] = typer.Option([], "--paths", help="Test folders to look in (repeatable or comma-separated); "
                                                         "e.g. --paths test/inductor test/dynamo."),
    extra_paths: list[str] = typer.Argument(None, metavar="PATHS", show_default=False,
                                            help="More test folders (so `--paths a b` works)."),
    rev: str = typer.Option("HEAD", "--rev", help="Walk the history reachable from this revision."),
    max_commits: Optional[int] = typer.Option(None, "--max-commits", help="Stop after this many commits."),
    workers: int = typer.Option(1, "--workers", help="Sandbox workers validating seeds in eager."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds per validation (default: NNFORGE_WORKER_TIMEOUT_S)."),
    no_validate: bool = typer.Option(False, "--no-validate", help="Write every extracted program without running it."),
    no_llm: bool = typer.Option(False, "--no-llm", help="Rules only, even when an LLM is configured."),
) -> None:
    """Find bug-fix commits and turn the regression tests they add into seed TestCases."""
    console = Console(stderr=True)
    all_paths = tuple(p.strip() for item in list(paths) + list(extra_paths or []) for p in item.split(",") if p.strip())
    try:
        open_repo(str(repo))
        output.mkdir(parents=True, exist_ok=True)
    except NotAGitRepo as e:
        console.print(f"[red]{e}[/red]", soft_wrap=True)
        raise typer.Exit(2)
    except OSError as e:
        console.print(f"[red]cannot create {output}: {e}[/red]", soft_wrap=True)
        raise typer.Exit(2)
    llm = _llm_for(not no_llm, console)
    kwargs = dict(since=since, paths=all_paths, rev=rev, max_commits=max_commits, llm=llm, log=console.print)
    try:
        if no_validate:
            summary = mine_history(str(repo), output, **kwargs)
        else:
            pool, timeout_s = _pool(workers, timeout)
            with pool:
                summary = mine_history(str(repo), output, call=pool.call, workers=workers, timeout_s=timeout_s, **kwargs)
    except NotAGitRepo as e:  # e.g. an unknown --rev
        console.print(f"[red]{e}[/red]", soft_wrap=True)
        raise typer.Exit(2)
    _show(console, f"history mine: {repo}", summary,
          ["scanned", "fix_commits", "fix_commits_with_tests", "tests_added", "extracted", "valid", "invalid",
           "fix_commits_with_seed", "seed_fraction", "commits_per_s"])
    console.print(f"{summary['valid']} seed(s) written to {output}")


@history_app.command("ingest")
def ingest(
    issues_file: Path = typer.Argument(..., metavar="ISSUES_FILE",
                                       help="JSON list of issues as the GitHub REST API returns them."),
    output: Path = typer.Option(..., "-o", "--output", help="Folder for the seeds and text_seeds.jsonl."),
    workers: int = typer.Option(1, "--workers", help="Sandbox workers validating seeds in eager."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds per validation (default: NNFORGE_WORKER_TIMEOUT_S)."),
    no_validate: bool = typer.Option(False, "--no-validate", help="Write every extracted program without running it."),
    no_llm: bool = typer.Option(False, "--no-llm", help="Rules only, even when an LLM is configured."),
) -> None:
    """Turn the code blocks of bug reports into seed TestCases; keep the rest as text seeds."""
    console = Console(stderr=True)
    try:
        load_issues(issues_file)  # a file that is not JSON fails here, before a pool starts
        output.mkdir(parents=True, exist_ok=True)
    except IssuesFileError as e:
        console.print(f"[red]{e}[/red]", soft_wrap=True)
        raise typer.Exit(2)
    except OSError as e:
        console.print(f"[red]cannot create {output}: {e}[/red]", soft_wrap=True)
        raise typer.Exit(2)
    llm = _llm_for(not no_llm, console)
    if no_validate:
        summary = ingest_issues(issues_file, output, llm=llm, log=console.print)
    else:
        pool, timeout_s = _pool(workers, timeout)
        with pool:
            summary = ingest_issues(issues_file, output, call=pool.call, workers=workers, timeout_s=timeout_s,
                                    llm=llm, log=console.print)
    _show(console, f"history ingest: {issues_file}", summary,
          ["items", "issues", "malformed", "with_code", "extracted", "valid", "invalid", "text_seeds"])
    console.print(f"{summary['valid']} seed(s) and {summary['text_seeds']} text seed(s) written to {output}")

"""Mine a compiler's git history for bug-fix commits and the regression tests they add.

A commit counts as a fix when its message says so ("fix", "bug", "regression", "Fixes #123",
"issue #123") or when it adds a test function in a test file together with a change to a
non-test file (the usual shape of a fix with its regression test). A bare pull-request reference
("(#123)", which every merged commit of some projects carries) counts only together with an added
test. Commits that touch only documentation, and the root commit, are never fixes.

For each fix, the test functions it adds (present in the new version of a test file, absent from
the parent's) are extracted into TestCase programs by the rules of `history_extract.py` (or by an
LLM, when one is configured). The result carries the commit, the files it touched and a category
guess; whether the program runs is for the caller to check in a sandbox (the generator stage may
not import the oracle).

    for scan in scan_history("/src/pytorch", since="2024-01-01", paths=["test/inductor"]):
        for cand in candidates_from_commit(scan):
            ...
"""

from __future__ import annotations

import ast
import re
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Iterable, Iterator

from nnforge.core.testcase import TestCase
from nnforge.generator.history_category import CategoryGuess, guess_category
from nnforge.generator.history_extract import Extraction, extract_test, function_source, test_functions

_FIX_WORDS = re.compile(r"\b(fix(es|ed|ing)?|bug(fix)?s?|regression|crash(es|ed)?|wrong (result|output)s?|"
                        r"incorrect|resolve[sd]?|segfault|miscompil\w*)\b", re.IGNORECASE)
_ISSUE_REF = re.compile(r"(\b(fix(es|ed)?|close[sd]?|resolve[sd]?)\s*:?\s*#\d+|\bissues?\s*#?\d+|/issues/\d+|"
                        r"\bgh-\d+\b)", re.IGNORECASE)
_PR_REF = re.compile(r"\(#\d+\)|/pull/\d+")
_DOC_SUFFIXES = (".md", ".rst", ".txt", ".ipynb", ".png", ".svg", ".jpg", ".html", ".css")
_DIFF_LIMIT = 200_000


class NotAGitRepo(ValueError):
    """The path given as a repository is not one (or does not exist)."""


@dataclass(frozen=True)
class TestFileChange:
    """A test file a commit touched: its new text and the test functions the commit added to it."""

    path: str
    source: str
    added: tuple[str, ...]
    error: str = ""  # e.g. the new version does not parse

    __test__ = False


@dataclass(frozen=True)
class CommitScan:
    """What the miner learnt about one commit."""

    sha: str
    summary: str
    message: str
    date: str
    files: tuple[str, ...]
    is_fix: bool
    fix_reasons: tuple[str, ...]
    test_changes: tuple[TestFileChange, ...] = ()
    diff: str = ""  # unified diff of the non-test files (fix commits only), for the category guess

    @property
    def added_tests(self) -> list[tuple[str, str]]:
        return [(t.path, name) for t in self.test_changes for name in t.added]

    def to_json(self) -> dict[str, Any]:
        return {"sha": self.sha, "summary": self.summary, "date": self.date, "files": list(self.files),
                "is_fix": self.is_fix, "fix_reasons": list(self.fix_reasons),
                "added_tests": [f"{p}::{n}" for p, n in self.added_tests]}


@dataclass(frozen=True)
class SeedCandidate:
    """A TestCase made from history, not yet run; or the reason none could be made (case is None)."""

    seed_id: str
    case: TestCase | None
    error: str = ""
    source_text: str = ""  # the test function / code block it came from

    @property
    def ok(self) -> bool:
        return self.case is not None


@dataclass
class ScanStats:
    """Running counts of a scan; `scan_history` fills it as it goes."""

    scanned: int = 0
    fix_commits: int = 0
    with_tests: int = 0
    elapsed_s: float = 0.0
    errors: list[str] = field(default_factory=list)


# -- which files are tests ----------------------------------------------------------------------------------------
def is_test_file(path: str, paths: Iterable[str] = ()) -> bool:
    """A Python test file (test_*.py / *_test.py, or any .py under a test/ or tests/ folder), inside `paths` if given."""
    p = PurePosixPath(path)
    if p.suffix != ".py":
        return False
    prefixes = [x.strip("/") for x in paths if x.strip("/")]
    if prefixes and not any(path == pre or path.startswith(pre + "/") for pre in prefixes):
        return False
    return p.name.startswith("test_") or p.name.endswith("_test.py") or any(
        part in ("test", "tests") for part in p.parts[:-1])


def is_doc_file(path: str) -> bool:
    p = PurePosixPath(path)
    return p.suffix.lower() in _DOC_SUFFIXES or "docs" in p.parts or "doc" in p.parts or p.name in ("LICENSE", "CODEOWNERS")


def fix_reasons(message: str, files: Iterable[str], adds_test: bool, paths: Iterable[str] = ()) -> tuple[str, ...]:
    """Why a commit looks like a fix (empty: it does not). See the module docstring for the rules."""
    files = list(files)
    if files and all(is_doc_file(f) for f in files):
        return ()
    reasons = []
    m = _FIX_WORDS.search(message)
    if m:
        reasons.append(f"message says {m.group(0)!r}")
    m = _ISSUE_REF.search(message)
    if m:
        reasons.append(f"references an issue ({m.group(0).strip()})")
    code_changed = any(not is_test_file(f) and not is_doc_file(f) for f in files)
    if adds_test and code_changed:
        reasons.append("adds a regression test next to a code change")
    if not reasons and adds_test:
        m = _PR_REF.search(message)
        if m:
            reasons.append(f"adds a test; pull request {m.group(0)}")
    return tuple(reasons)


# -- scanning -----------------------------------------------------------------------------------------------------
def open_repo(path: str) -> Any:
    """A git.Repo, or NotAGitRepo with a readable message."""
    import git

    try:
        return git.Repo(path, search_parent_directories=False)
    except git.NoSuchPathError:
        raise NotAGitRepo(f"{path}: no such directory") from None
    except git.InvalidGitRepositoryError:
        raise NotAGitRepo(f"{path}: not a git repository (no .git found)") from None


def scan_history(repo_path: str, *, since: str | None = None, paths: Iterable[str] = (), rev: str = "HEAD",
                 max_commits: int | None = None, stats: ScanStats | None = None) -> Iterator[CommitScan]:
    """Every commit reachable from `rev` (newest first; touching `paths` when given), classified.

    `paths` limits both the commits git walks and the files that count as tests: with
    `paths=["test/inductor"]` a commit that adds a test elsewhere is not looked at.
    """
    import git

    repo = open_repo(repo_path)
    paths = [p.strip("/") for p in paths if p.strip("/")]
    stats = stats if stats is not None else ScanStats()
    kwargs: dict[str, Any] = {}
    if since:
        kwargs["since"] = since
    if max_commits:
        kwargs["max_count"] = max_commits
    start = time.perf_counter()
    try:
        commits = repo.iter_commits(rev, paths=paths or None, **kwargs)
        for commit in commits:
            try:
                scan = _scan_commit(commit, paths, git.NULL_TREE)
            except Exception as e:  # a broken object, an odd encoding: count it, go on
                stats.errors.append(f"{commit.hexsha[:12]}: {type(e).__name__}: {e}")
                continue
            finally:
                stats.scanned += 1
                stats.elapsed_s = time.perf_counter() - start
            if scan.is_fix:
                stats.fix_commits += 1
                if scan.added_tests:
                    stats.with_tests += 1
            yield scan
    except git.GitCommandError as e:
        m = re.search(r"fatal: [^'\n]*", str(e.stderr or e))
        raise NotAGitRepo(f"{repo_path}: git could not list the history of {rev!r} "
                          f"({m.group(0).strip() if m else str(e).strip()})") from None
    stats.elapsed_s = time.perf_counter() - start


def _scan_commit(commit: Any, paths: list[str], null_tree: Any) -> CommitScan:
    parent = commit.parents[0] if commit.parents else None
    # One `git diff` per commit, parent -> commit, with the patch (kept for the category guess of fixes).
    diffs = parent.diff(commit, create_patch=True) if parent is not None else commit.diff(null_tree)
    files = sorted({d.b_path or d.a_path for d in diffs})
    test_changes = []
    for d in diffs:
        path = d.b_path or d.a_path
        if d.b_blob is None or not is_test_file(path, paths):
            continue  # deleted, or not a test file
        new_src = _blob_text(d.b_blob)
        old_src = _blob_text(d.a_blob) if d.a_blob is not None else ""
        try:
            new_tests = test_functions(new_src)
        except SyntaxError as e:
            test_changes.append(TestFileChange(path, new_src, (), f"new version does not parse: {e.msg}"))
            continue
        try:
            old_tests = set(test_functions(old_src)) if old_src else set()
        except SyntaxError:
            old_tests = set()
        added = tuple(n for n in new_tests if n not in old_tests)
        if added:
            test_changes.append(TestFileChange(path, new_src, added))
    message = commit.message if isinstance(commit.message, str) else commit.message.decode("utf-8", "replace")
    adds_test = any(t.added for t in test_changes)
    # A root commit imports the project: everything in it is "added", nothing is fixed.
    reasons = fix_reasons(message, files, adds_test, paths) if parent is not None else ()
    diff_text = _code_diff(diffs) if reasons else ""
    return CommitScan(
        sha=commit.hexsha, summary=message.strip().splitlines()[0] if message.strip() else "", message=message,
        date=commit.committed_datetime.isoformat(), files=tuple(files), is_fix=bool(reasons),
        fix_reasons=reasons, test_changes=tuple(test_changes), diff=diff_text,
    )


def _blob_text(blob: Any) -> str:
    return blob.data_stream.read().decode("utf-8", errors="replace")


def _code_diff(diffs: Any) -> str:
    """Unified diff of the non-test, non-doc files of a commit (capped), parent -> commit."""
    out, size = [], 0
    for d in diffs:
        path = d.b_path or d.a_path
        if is_test_file(path) or is_doc_file(path) or not d.diff:
            continue
        text = d.diff.decode("utf-8", errors="replace") if isinstance(d.diff, bytes) else str(d.diff)
        out.append(f"--- a/{path}\n+++ b/{path}\n{text}")
        size += len(text)
        if size > _DIFF_LIMIT:
            break
    return "\n".join(out)[:_DIFF_LIMIT]


# -- commits to seed candidates -----------------------------------------------------------------------------------
def commit_category(scan: CommitScan, code: str = "", llm: Any = None) -> CategoryGuess:
    """The category guess for a fix commit: the LLM's if one is configured and answers, else the rules'."""
    if llm is not None:
        guess = llm.categorize(f"Commit message:\n{scan.message}\n\nFiles: {', '.join(scan.files)}\n\n"
                               f"Diff (excerpt):\n{scan.diff[:6000]}\n\nRegression test:\n{code[:3000]}")
        if guess is not None:
            return guess
    non_test = [f for f in scan.files if not is_test_file(f)]
    return guess_category(scan.message, scan.diff, paths=non_test, code=code)


def candidates_from_commit(scan: CommitScan, llm: Any = None) -> list[SeedCandidate]:
    """One candidate per test function the fix commit added (an error candidate when extraction failed).

    `llm`: a `history_llm.HistoryLLM` or None; it converts the tests the rules cannot, and guesses categories.
    """
    out = []
    used: set[str] = set()
    for change in scan.test_changes:
        for name in change.added:
            seed_id = base = seed_id_for_commit(scan.sha, name)
            k = 1
            while seed_id in used:  # the same test name in two classes or files of one commit
                k += 1
                seed_id = f"{base}-{k}"
            used.add(seed_id)
            code = function_source(change.source, name)
            ex = extract_test(change.source, name)
            if not ex.ok and llm is not None:
                converted = llm.convert(code, context=_file_context(change.source), origin=f"{change.path}::{name}")
                if converted is not None:
                    ex = Extraction(name, converted, "llm", notes=("rules: " + ex.error,))
            if not ex.ok:
                out.append(SeedCandidate(seed_id, None, ex.error, code))
                continue
            guess = commit_category(scan, code, llm)
            meta = {
                "origin": "history-git",
                "commit": scan.sha,
                "commit_summary": scan.summary,
                "commit_date": scan.date,
                "files_touched": list(scan.files),
                "fix_reasons": list(scan.fix_reasons),
                "test_file": change.path,
                "test_name": name,
                "extraction": ex.pattern,
                "extraction_notes": list(ex.notes),
                "category": guess.category,
                "category_reason": guess.reason,
                "category_source": guess.source,
                "seed_id": seed_id,
            }
            out.append(SeedCandidate(seed_id, TestCase(program=ex.program, meta=meta), "", code))
    return out


def seed_id_for_commit(sha: str, test_name: str) -> str:
    short = re.sub(r"[^A-Za-z0-9_]+", "_", test_name.rsplit(".", 1)[-1])[:60]
    return f"git-{sha[:10]}-{short}"


def _file_context(source: str) -> str:
    """The imports and module-level helpers of a test file, for an LLM prompt (capped)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign))
            and not (isinstance(n, ast.FunctionDef) and n.name.startswith("test"))]
    text = "\n".join(ast.get_source_segment(source, n) or "" for n in keep)
    return text[:6000]

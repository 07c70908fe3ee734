"""Turn an export of a compiler's issue tracker into seed candidates and text seeds.

The input is a JSON list of issues in the shape the GitHub REST API returns (`number`, `title`,
`body`, `labels`, `state`; a search result's `{"items": [...]}` is accepted too). Code blocks are
pulled from each body (fenced with ``` or ~~~, Python or unlabelled, mentioning torch, not a
traceback) and run through the repro-script extractor of `history_extract.py`. A report without
code that extracts is not lost: it becomes a text seed the LLM mutator can put in its prompts.

A malformed item (not an object, missing or null body, labels of the wrong type, ...) is
reported with its index and skipped; only a file that is not JSON at all, or not a list of
items, is an error of the whole file (`IssuesFileError`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nnforge.core.testcase import TestCase
from nnforge.generator.history_category import CategoryGuess, guess_category
from nnforge.generator.history_extract import Extraction, extract_script
from nnforge.generator.history_git import SeedCandidate

_FENCE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.DOTALL | re.MULTILINE)
_PY_LANGS = ("", "python", "py", "python3", "py3", "pycon", "ipython")
_TEXT_BODY_LIMIT = 4000
MAX_BLOCKS_PER_ISSUE = 3


class IssuesFileError(ValueError):
    """The file cannot be read as a list of issues at all (missing, not JSON, wrong top level)."""


@dataclass(frozen=True)
class Issue:
    number: int
    title: str
    body: str
    labels: tuple[str, ...] = ()
    state: str = ""
    url: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number, "title": self.title, "body": self.body, "labels": list(self.labels),
                "state": self.state, "url": self.url}


@dataclass(frozen=True)
class ItemError:
    """Why item `index` of the file was skipped."""

    index: int
    number: Any
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "number": self.number, "error": self.error}


def load_issues(path: str | Path) -> tuple[list[Issue], list[ItemError]]:
    """The well-formed issues of an export, and one ItemError per item that is not."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise IssuesFileError(f"{path}: no such file") from None
    except OSError as e:
        raise IssuesFileError(f"{path}: cannot read it ({e.strerror or e})") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise IssuesFileError(f"{path}: not JSON ({e})") from None
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        data = data["items"]
    if not isinstance(data, list):
        raise IssuesFileError(f"{path}: expected a JSON list of issues (as the GitHub REST API returns), "
                              f"got a {type(data).__name__}")
    issues, errors = [], []
    for i, item in enumerate(data):
        try:
            issues.append(parse_issue(item))
        except ValueError as e:
            number = item.get("number") if isinstance(item, dict) else None
            errors.append(ItemError(i, number, str(e)))
    return issues, errors


def parse_issue(item: Any) -> Issue:
    """One issue from its GitHub REST JSON; ValueError says which field is wrong."""
    if not isinstance(item, dict):
        raise ValueError(f"item is a {type(item).__name__}, not an object")
    number = item.get("number")
    if isinstance(number, bool) or not isinstance(number, int):
        raise ValueError("missing or non-integer 'number'" if number is None else f"'number' is not an integer: {number!r}")
    title = item.get("title")
    if not isinstance(title, str):
        raise ValueError("missing 'title'" if title is None else "'title' is not a string")
    if "body" not in item:
        raise ValueError("missing 'body'")
    body = item["body"]
    if body is None:
        raise ValueError("'body' is null (an issue with no text)")
    if not isinstance(body, str):
        raise ValueError(f"'body' is a {type(body).__name__}, not a string")
    raw_labels = item.get("labels", [])
    if not isinstance(raw_labels, list):
        raise ValueError(f"'labels' is a {type(raw_labels).__name__}, not a list")
    labels = []
    for lab in raw_labels:
        if isinstance(lab, str):
            labels.append(lab)
        elif isinstance(lab, dict) and isinstance(lab.get("name"), str):
            labels.append(lab["name"])
        else:
            raise ValueError(f"a label is neither a string nor an object with a 'name': {lab!r}"[:200])
    state = item.get("state") or ""
    if not isinstance(state, str):
        raise ValueError("'state' is not a string")
    url = item.get("html_url") or item.get("url") or ""
    return Issue(number, title, body, tuple(labels), state, url if isinstance(url, str) else "")


def code_blocks(body: str) -> list[str]:
    """Fenced code blocks of a Markdown body that look like Python repros (torch code, not output)."""
    out = []
    for m in _FENCE.finditer(body.replace("\r\n", "\n")):
        lang, code = m.group(2).lower(), m.group(3)
        if lang not in _PY_LANGS:
            continue
        stripped = code.strip()
        if not stripped or stripped.startswith(("Traceback", "$ ", ">>> Traceback")) or "torch" not in stripped:
            continue
        if lang == "pycon" or stripped.startswith(">>> "):
            code = "\n".join(line[4:] for line in code.splitlines() if line.startswith((">>> ", "... ")))
        out.append(code)
    return out


def issue_category(issue: Issue, code: str = "", llm: Any = None) -> CategoryGuess:
    if llm is not None:
        guess = llm.categorize(f"Bug report #{issue.number}: {issue.title}\nLabels: {', '.join(issue.labels)}\n\n"
                               f"{issue.body[:8000]}")
        if guess is not None:
            return guess
    return guess_category(f"{issue.title}\n{issue.body}", labels=issue.labels, code=code)


def candidates_from_issue(issue: Issue, llm: Any = None) -> list[SeedCandidate]:
    """One candidate per code block (at most MAX_BLOCKS_PER_ISSUE); error candidates say why one failed.

    An empty list means the report has no code: it is a text seed only.
    """
    out = []
    for k, code in enumerate(code_blocks(issue.body)[:MAX_BLOCKS_PER_ISSUE]):
        seed_id = f"issue-{issue.number}-{k}"
        ex = extract_script(code, name=f"#{issue.number}")
        if not ex.ok and llm is not None:
            converted = llm.convert(code, origin=f"bug report #{issue.number} ({issue.title})", why=ex.error)
            if converted is not None:
                ex = Extraction(ex.name, converted, "llm", notes=("rules: " + ex.error,))
        if not ex.ok:
            out.append(SeedCandidate(seed_id, None, ex.error, code))
            continue
        guess = issue_category(issue, code, llm)
        meta = {
            "origin": "history-issue",
            "issue": issue.number,
            "issue_title": issue.title,
            "issue_state": issue.state,
            "issue_url": issue.url,
            "labels": list(issue.labels),
            "code_block": k,
            "extraction": ex.pattern,
            "extraction_notes": list(ex.notes),
            "category": guess.category,
            "category_reason": guess.reason,
            "category_source": guess.source,
            "seed_id": seed_id,
        }
        out.append(SeedCandidate(seed_id, TestCase(program=ex.program, meta=meta), "", code))
    return out


def text_seed(issue: Issue, why: str, guess: CategoryGuess | None = None) -> dict[str, Any]:
    """A report kept as text for the LLM mutator's prompts (one line of text_seeds.jsonl)."""
    guess = guess or issue_category(issue)
    body = issue.body if len(issue.body) <= _TEXT_BODY_LIMIT else issue.body[:_TEXT_BODY_LIMIT] + "\n[...]"
    return {"origin": "history-issue", "issue": issue.number, "title": issue.title, "state": issue.state,
            "url": issue.url, "labels": list(issue.labels), "body": body, "why_text_only": why,
            "category": guess.category, "category_reason": guess.reason, "category_source": guess.source}

"""A history seed folder: what `nnforge history mine/ingest` writes and a campaign reads.

    DIR/<seed_id>/            one TestCase folder per seed that ran in eager (program.py, meta.json, ...)
    DIR/text_seeds.jsonl      one JSON object per bug report without runnable code (for LLM prompts)
    DIR/history_summary.json  {"git": {...}, "issues": {...}}: counts of the last run of each command

Meta of a seed: origin ("history-git" | "history-issue"), seed_id, category, category_reason,
category_source, and for commits commit / commit_summary / commit_date / files_touched /
fix_reasons / test_file / test_name, for reports issue / issue_title / labels / code_block.

A campaign (`nnforge campaign --seeds generator,history:DIR`) calls `load_history_seeds(DIR)` to put
the seeds in its pool and `category_prior(DIR)` to weight its scheduler's prior by the category mix
of the compiler's history: a category that broke often in the past gets more mutants.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from nnforge.core.testcase import CaseFormatError, PROGRAM_FILE, TestCase
from nnforge.generator.history_category import TAXONOMY_IDS

SUMMARY_FILE = "history_summary.json"
TEXT_SEEDS_FILE = "text_seeds.jsonl"
HISTORY_ORIGINS = ("history-git", "history-issue")


def seed_folders(folder: str | os.PathLike) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / PROGRAM_FILE).is_file())


def load_history_seeds(folder: str | os.PathLike) -> list[TestCase]:
    """Every seed TestCase in a history folder, in name order (unreadable folders are skipped).

    Raises FileNotFoundError when `folder` does not exist, so a typo in `--seeds history:DIR` is loud.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such history seed folder (make one with `nnforge history mine/ingest`)")
    out = []
    for sub in seed_folders(folder):
        try:
            out.append(TestCase.load(sub))
        except (CaseFormatError, OSError, ValueError):
            continue
    return out


def load_text_seeds(folder: str | os.PathLike) -> list[dict[str, Any]]:
    """The bug reports kept as text (text_seeds.jsonl), skipping lines that are not JSON objects."""
    path = Path(folder) / TEXT_SEEDS_FILE
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out


def read_summary(folder: str | os.PathLike) -> dict[str, Any]:
    path = Path(folder) / SUMMARY_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_summary(folder: str | os.PathLike, section: str, summary: dict[str, Any]) -> Path:
    """Replace one section ("git" or "issues") of the folder's summary, keeping the other."""
    folder = Path(folder)
    data = read_summary(folder)
    data[section] = summary
    path = folder / SUMMARY_FILE
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{SUMMARY_FILE}.")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
    os.replace(tmp, path)
    return path


def category_prior(folder: str | os.PathLike, *, smoothing: float = 0.0) -> dict[str, float]:
    """Share of each TAXONOMY.md category in the history behind `folder` (sums to 1; {} if nothing known).

    Counts come from the summary's "categories" of each section (every fix commit and every report,
    runnable or not); without a summary, from the seeds' and text seeds' meta. "unknown" is left out.
    `smoothing` adds that count to every category, so none gets a zero prior.
    """
    counts: Counter[str] = Counter()
    summary = read_summary(folder)
    for section in summary.values():
        if isinstance(section, dict) and isinstance(section.get("categories"), dict):
            for cat, n in section["categories"].items():
                if cat in TAXONOMY_IDS and isinstance(n, (int, float)):
                    counts[cat] += n
    if not summary:
        folder = Path(folder)
        for sub in seed_folders(folder):
            try:
                meta = json.loads((sub / "meta.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(meta, dict) and meta.get("category") in TAXONOMY_IDS:
                counts[meta["category"]] += 1
        for item in load_text_seeds(folder):
            if item.get("category") in TAXONOMY_IDS:
                counts[item["category"]] += 1
    if smoothing > 0:
        for cat in TAXONOMY_IDS:
            counts[cat] += smoothing
    total = sum(counts.values())
    if not total:
        return {}
    return {cat: counts[cat] / total for cat in TAXONOMY_IDS if counts[cat]}

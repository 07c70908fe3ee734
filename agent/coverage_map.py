"""The campaign's union of covered compiler lines (parent side of `oracle/coverage_probe.py`).

Each worker reports the lines that are new to *it*; workers restart and several run at once,
so only the parent knows which lines are new to the campaign. `CoverageMap.add` answers that,
and its return value (lines never covered before) is the reward the scheduler can use.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

PACKAGES = ("torch/_dynamo", "torch/_inductor", "torch/_functorch")


class CoverageMap:
    """Covered (file, line) pairs of the whole campaign, with a count kept up to date."""

    def __init__(self) -> None:
        self._lines: dict[str, set[int]] = {}
        self._total = 0

    @property
    def covered_lines(self) -> int:
        return self._total

    @property
    def files(self) -> int:
        return len(self._lines)

    def add(self, new: Mapping[str, Iterable[int]] | None) -> int:
        """Merge one test's `coverage_new` and return how many lines nobody had covered before."""
        if not new:
            return 0
        added = 0
        for name, lines in new.items():
            seen = self._lines.setdefault(name, set())
            before = len(seen)
            seen.update(int(x) for x in lines)
            added += len(seen) - before
        self._total += added
        return added

    def per_package(self) -> dict[str, int]:
        """Covered lines per compiler package (`torch/_dynamo`, ...); other files under `other`."""
        out = {p: 0 for p in PACKAGES}
        for name, lines in self._lines.items():
            key = next((p for p in PACKAGES if name.replace("\\", "/").startswith(p + "/")), "other")
            out[key] = out.get(key, 0) + len(lines)
        return out

    def to_json(self) -> dict[str, Any]:
        """Compact form (sorted line lists per file), for saving beside the store and resuming."""
        return {name: sorted(lines) for name, lines in sorted(self._lines.items())}

    @classmethod
    def from_json(cls, data: Mapping[str, Iterable[int]] | None) -> "CoverageMap":
        cmap = cls()
        cmap.add(data)
        return cmap


# -- the campaign's file ------------------------------------------------------------------------------
COVERAGE_FILE = "coverage.json"


def load_coverage_map(folder: Path) -> Any:
    """The campaign's union of covered compiler lines (agent/coverage_map.py), from DIR/coverage.json."""
    path = folder / COVERAGE_FILE
    if path.is_file():
        try:
            return CoverageMap.from_json(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
    return CoverageMap()


def save_coverage_map(folder: Path, cmap: Any) -> None:
    path = folder / COVERAGE_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(cmap.to_json()))
    os.replace(tmp, path)

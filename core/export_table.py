"""What the installed ONNX path carries, per operator instance: the export probe's table.

Keys are the generator's `instance_key(op, input dtypes)` (`pow(int16,int16)`); each key counts,
per check (`export`: exporter + ONNX checker; `ort`: an ONNX Runtime session; `tvm`: TVM's Relax
importer), how many probe programs passed and how many were refused. A key is blocked for a check
only when that check refused it and never passed it: attribute forms that sometimes pass keep
the key open, so probing never takes away more than it saw refused.

The table is plain data in one JSON file per set of installed versions, so a probe runs once per
machine and upgrade, and a table from other versions is never used.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

CHECKS = ("export", "ort", "tvm")
TARGET_CHECKS = {"ort": ("export", "ort"), "tvm": ("export", "tvm")}  # what stands in front of each runtime
FORMAT = 1


@dataclass
class ExportTable:
    versions: dict[str, str]
    counts: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # key -> check -> [passed, refused]
    reasons: dict[str, str] = field(default_factory=dict)  # key -> the first refusal seen, for people
    probe_s: float = 0.0

    def record(self, key: str, outcome: dict[str, int | None], reason: str = "") -> None:
        """One probe program's outcome: check -> 1 (passed), 0 (refused) or None (not reached)."""
        per_key = self.counts.setdefault(key, {})
        for check, result in outcome.items():
            if result is None:
                continue
            pair = per_key.setdefault(check, [0, 0])
            pair[0 if result else 1] += 1
        if reason and key not in self.reasons:
            self.reasons[key] = reason

    def refused(self, key: str, check: str) -> bool:
        passed, refused = self.counts.get(key, {}).get(check, [0, 0])
        return refused > 0 and passed == 0

    def blocked(self, checks: Iterable[str]) -> frozenset[str]:
        """Keys some of `checks` refused and never passed: the instances a target's tests must not hold."""
        checks = tuple(checks)
        return frozenset(k for k in self.counts if any(self.refused(k, c) for c in checks))

    def blocked_for_target(self, target: str) -> frozenset[str]:
        return self.blocked(TARGET_CHECKS.get(target, ("export",)))

    # -- files ----------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "versions": self.versions, "probe_s": self.probe_s, "counts": self.counts,
                "reasons": self.reasons}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ExportTable":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError("not an export table of this NNForge")
        counts = {str(k): {str(c): [int(x) for x in v][:2] for c, v in per.items()} for k, per in d["counts"].items()}
        return cls(versions=dict(d["versions"]), counts=counts, reasons=dict(d.get("reasons") or {}),
                   probe_s=float(d.get("probe_s") or 0.0))

    def save(self, folder: str | Path) -> Path:
        path = table_path(folder, self.versions)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.to_json(), indent=0, sort_keys=True))
        tmp.replace(path)  # another campaign reading it sees the old file or the new one, whole
        return path


def table_path(folder: str | Path, versions: dict[str, str]) -> Path:
    digest = hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:16]
    return Path(os.path.expanduser(str(folder))) / f"export-table-{digest}.json"


def load_table(folder: str | Path, versions: dict[str, str]) -> ExportTable | None:
    """The table probed with exactly these versions, or None (none yet, or unreadable)."""
    path = table_path(folder, versions)
    try:
        table = ExportTable.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return table if table.versions == versions else None

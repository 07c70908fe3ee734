"""What the installed ONNX path carries, per operator instance: the export probe's table.

Each probe program is one row: its operator instance (the generator's `instance_key(op, input
dtypes)`, `pow(int16,int16)`), its rank key (`rank_key(op, first input's rank)`, `pow@0`), and per
check (`export`: exporter, ONNX checker, and the graph's declared output dtypes against eager's;
`ort`: an ONNX Runtime session; `tvm`: TVM's Relax importer) whether it passed or was refused, and
its form keys (`form_keys(op, attrs)`, `permute[dims<0]`: how its drawn attributes are spelt). A
key is blocked for a check only when that check refused it and never passed it: attribute forms
that sometimes pass keep the key open, so probing never takes away more than it saw refused. A form
key is blocked where every probe spelt so was refused and the same operator spelt otherwise passed:
then the spelling, not the operator or its dtypes, is what the path refuses.

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
FORMAT = 3


@dataclass
class ExportTable:
    versions: dict[str, str]
    # one row per probe program: [instance key, rank key, {check: 1 passed | 0 refused}, [form key, ...]]
    probes: list[list[Any]] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # instance key -> the first refusal seen, for people
    probe_s: float = 0.0

    def record(self, key: str, outcome: dict[str, int | None], reason: str = "", rank_key: str = "",
               forms: Iterable[str] = ()) -> None:
        """One probe program's outcome: check -> 1 (passed), 0 (refused) or None (not reached)."""
        self.probes.append([key, rank_key, {c: v for c, v in outcome.items() if v in (0, 1)}, sorted(forms)])
        if reason and key not in self.reasons:
            self.reasons[key] = reason

    def blocked(self, checks: Iterable[str]) -> frozenset[str]:
        """Keys some of `checks` refused and never passed: the instances a target's tests must not hold.

        Instance keys (`log(int64)`) are blocked on their own probes, an operator's name
        (`rms_norm`) where every probe of it was refused, whatever its dtypes. A rank key (`pixel_shuffle@3`:
        the operator with a first input of that rank) is blocked where every probe at that rank
        was refused and at least one of them had input dtypes that pass at another rank, so a
        refusal that the dtypes explain never blocks a rank."""
        checks = tuple(checks)

        def refused(outcomes: list[dict[str, int]], check: str) -> bool:
            seen = [o[check] for o in outcomes if check in o]
            return bool(seen) and not any(seen)

        forms = self._blocked_forms(checks, refused)
        by_key: dict[str, list[dict[str, int]]] = {}
        by_rank: dict[str, list[tuple[str, dict[str, int]]]] = {}
        for key, rank_key, outcome, row_forms in self.probes:
            if forms.intersection(row_forms):
                continue  # its spelling explains the refusal: it says nothing of its dtypes or rank
            by_key.setdefault(key, []).append(outcome)
            if rank_key:
                by_rank.setdefault(rank_key, []).append((key, outcome))

        keys = {k for k, outs in by_key.items() if any(refused(outs, c) for c in checks)}
        by_op: dict[str, list[dict[str, int]]] = {}
        for key, outs in by_key.items():
            by_op.setdefault(key.split("(", 1)[0], []).extend(outs)
        # an operator every probe of which was refused: whatever dtypes a test gives it
        keys |= {op for op, outs in by_op.items() if any(refused(outs, c) for c in checks)}
        for rank_key, rows in by_rank.items():
            for c in checks:
                if refused([o for _, o in rows], c) and any(k not in keys for k, o in rows if c in o):
                    keys.add(rank_key)
                    break
        return frozenset(keys | forms)

    def _blocked_forms(self, checks: tuple[str, ...], refused: Any) -> set[str]:
        """Form keys every probe of which some check refused, where the operator spelt otherwise passed it."""
        by_form: dict[str, list[dict[str, int]]] = {}
        plain: dict[str, list[tuple[list[str], dict[str, int]]]] = {}
        for key, _, outcome, row_forms in self.probes:
            for f in row_forms:
                by_form.setdefault(f, []).append(outcome)
            plain.setdefault(key.split("(", 1)[0], []).append((row_forms, outcome))
        out = set()
        for f, outs in by_form.items():
            others = [o for fs, o in plain.get(f.split("[", 1)[0], []) if f not in fs]
            if any(refused(outs, c) and any(o.get(c) == 1 for o in others) for c in checks):
                out.add(f)
        return out

    def blocked_for_target(self, target: str) -> frozenset[str]:
        return self.blocked(TARGET_CHECKS.get(target, ("export",)))

    # -- files ----------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "versions": self.versions, "probe_s": self.probe_s, "probes": self.probes,
                "reasons": self.reasons}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ExportTable":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError("not an export table of this NNForge")
        probes = [[str(k), str(r), {str(c): int(v) for c, v in o.items() if v in (0, 1)}, [str(f) for f in fs]]
                  for k, r, o, fs in d["probes"]]
        return cls(versions=dict(d["versions"]), probes=probes, reasons=dict(d.get("reasons") or {}),
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

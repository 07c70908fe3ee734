"""The campaign store: one SQLite file (WAL) in the campaign folder holding tests, findings and
clusters, so that a campaign can be interrupted at any moment and resumed without losing a bug.

Why a finding is written before anything is done with it: reduction and triage take minutes and
run untrusted programs; if the process is killed half-way, the finding must still be there (with
status `new`) for the next `nnforge triage` to pick up.

Kept deliberately small: the campaign loop will add what it needs. Findings are also written as
plain folders a human can read (`findings/<cluster_id>/`), by `nnforge triage`, not by the store.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from nnforge.core.signature import Signature
from nnforge.core.verdict import Verdict
from nnforge.triage.cluster import ClusterRecord

STORE_FILE = "store.sqlite"
SCHEMA_VERSION = "1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tests (
    case_id TEXT NOT NULL,
    folder TEXT,
    origin TEXT,
    target TEXT NOT NULL,
    symptom TEXT NOT NULL,
    rung TEXT,
    verdict_json TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (case_id, target)
);
CREATE TABLE IF NOT EXISTS findings (
    finding_id INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id TEXT NOT NULL,
    case_folder TEXT,
    target TEXT NOT NULL,
    verdict_json TEXT NOT NULL,
    signature_digest TEXT,
    reduced_folder TEXT,
    status TEXT NOT NULL DEFAULT 'new',
    error TEXT,
    created REAL NOT NULL,
    UNIQUE (case_id, target)
);
CREATE TABLE IF NOT EXISTS clusters (
    cluster_id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    signature_json TEXT NOT NULL,
    representative INTEGER,
    count INTEGER NOT NULL DEFAULT 0,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS findings_status ON findings (status);
"""


@dataclass(frozen=True)
class Finding:
    """A bug verdict for one case on one target, as recorded before triage."""

    finding_id: int
    case_id: str
    case_folder: str | None
    target: str
    verdict: Verdict
    signature_digest: str | None
    reduced_folder: str | None
    status: str  # "new" (waiting) | "triaged" (reduced and signed) | "attached" (joined its key's cluster unreduced)
    error: str | None  # why the last triage attempt failed, if it did
    created: float
    pkey: str | None = None  # provisional root-cause key (triage/rootcause.py), set when recorded


@dataclass(frozen=True)
class Cluster:
    """One bug class: findings whose signatures match (the id is the first signature's digest)."""

    cluster_id: str
    title: str
    signature: Signature
    representative: int | None  # finding_id whose reduced case stands for the cluster
    count: int
    first_seen: float
    last_seen: float
    repro_status: str = "unchecked"  # "unchecked" | "reproduced" | "unreproduced"
    repro_detail: str = ""  # exit codes, or why it did not reproduce
    llm_title: str | None = None  # the triage LLM's title, when it passed NNForge's checks
    hypothesis: str | None = None  # the triage LLM's root-cause hypothesis (unverified)
    llm_model: str | None = None  # who wrote those two

    @property
    def display_title(self) -> str:
        return self.llm_title or self.title

    def record(self) -> ClusterRecord:
        return ClusterRecord(self.cluster_id, self.signature, self.count, self.title)


class Store:
    """The campaign's SQLite store. `path` is the campaign folder (or the .sqlite file itself)."""

    def __init__(self, path: str | os.PathLike):
        p = Path(path)
        if p.suffix != ".sqlite":
            p.mkdir(parents=True, exist_ok=True)
            p = p / STORE_FILE
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
        self.path = p
        self._db = sqlite3.connect(str(p), timeout=30.0, isolation_level=None)  # autocommit; explicit transactions
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._add_columns("findings", (("pkey", "TEXT"),))
        self._add_columns("clusters", (("repro_status", "TEXT NOT NULL DEFAULT 'unchecked'"), ("repro_detail", "TEXT"),
                                       ("llm_title", "TEXT"), ("hypothesis", "TEXT"), ("llm_model", "TEXT")))
        if self.get_meta("schema_version") is None:
            self.set_meta("schema_version", SCHEMA_VERSION)
            self.set_meta("created", str(time.time()))

    def _add_columns(self, table: str, columns: tuple[tuple[str, str], ...]) -> None:
        """Columns later versions added: a store made by an older NNForge gains them on open."""
        have = {r["name"] for r in self._db.execute(f"PRAGMA table_info({table})")}
        for name, decl in columns:
            if name not in have:
                try:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")
                except sqlite3.OperationalError as e:  # another connection added it first
                    if "duplicate column" not in str(e):
                        raise

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _tx(self) -> "_Transaction":
        return _Transaction(self._db)

    # -- meta -----------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row["value"]

    def set_meta(self, key: str, value: str) -> None:
        self._db.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                         (key, value))

    # -- tests ----------------------------------------------------------------------------------
    def add_test(self, case_id: str, verdict: Verdict, *, folder: str | os.PathLike | None = None,
                 origin: str | None = None) -> None:
        """Record that `case_id` was judged on `verdict.target` (the latest verdict wins)."""
        self._db.execute(
            "INSERT INTO tests (case_id, folder, origin, target, symptom, rung, verdict_json, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(case_id, target) DO UPDATE SET folder = excluded.folder, "
            "origin = excluded.origin, symptom = excluded.symptom, rung = excluded.rung, "
            "verdict_json = excluded.verdict_json, created = excluded.created",
            (case_id, None if folder is None else str(folder), origin, verdict.target, verdict.symptom.value,
             verdict.rung, verdict.dumps(), time.time()))

    def tests_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM tests").fetchone()[0])

    # -- findings -------------------------------------------------------------------------------
    def add_finding(self, case_id: str, verdict: Verdict, *, case_folder: str | os.PathLike | None = None) -> int:
        """Record a bug verdict (status `new`) and return its id; the same case and target twice
        is one finding (its id is returned, its status left as it is)."""
        if not verdict.is_bug:
            raise ValueError(f"a finding needs a bug verdict, got {verdict.symptom.value!r} for {case_id}")
        with self._tx():
            self._db.execute(
                "INSERT OR IGNORE INTO findings (case_id, case_folder, target, verdict_json, status, created) "
                "VALUES (?, ?, ?, ?, 'new', ?)",
                (case_id, None if case_folder is None else str(case_folder), verdict.target, verdict.dumps(), time.time()))
            row = self._db.execute("SELECT finding_id FROM findings WHERE case_id = ? AND target = ?",
                                   (case_id, verdict.target)).fetchone()
        return int(row["finding_id"])

    def finding(self, finding_id: int) -> Finding | None:
        row = self._db.execute("SELECT * FROM findings WHERE finding_id = ?", (finding_id,)).fetchone()
        return None if row is None else _finding(row)

    def findings(self, status: str | None = None) -> list[Finding]:
        if status is None:
            rows = self._db.execute("SELECT * FROM findings ORDER BY finding_id").fetchall()
        else:
            rows = self._db.execute("SELECT * FROM findings WHERE status = ? ORDER BY finding_id", (status,)).fetchall()
        return [_finding(r) for r in rows]

    def new_findings(self) -> list[Finding]:
        """Findings not yet triaged, oldest first."""
        return self.findings("new")

    def cluster_findings(self, cluster_id: str) -> list[Finding]:
        rows = self._db.execute("SELECT * FROM findings WHERE signature_digest = ? ORDER BY finding_id",
                                (cluster_id,)).fetchall()
        return [_finding(r) for r in rows]

    def set_pkey(self, finding_id: int, pkey: str) -> None:
        self._db.execute("UPDATE findings SET pkey = ? WHERE finding_id = ?", (pkey, finding_id))

    def key_members(self, pkey: str) -> list[Finding]:
        """Every finding with this provisional key, oldest first."""
        rows = self._db.execute("SELECT * FROM findings WHERE pkey = ? ORDER BY finding_id", (pkey,)).fetchall()
        return [_finding(r) for r in rows]

    def attach(self, finding_id: int, cluster_id: str) -> Cluster:
        """Count an unreduced finding into the cluster its provisional key's reduced findings
        reached (status `attached`); a later triage may still reduce it and move it."""
        now = time.time()
        with self._tx():
            row = self._db.execute("SELECT signature_digest, status FROM findings WHERE finding_id = ?",
                                   (finding_id,)).fetchone()
            if row is None:
                raise KeyError(f"no finding {finding_id} in {self.path}")
            if row["status"] in ("triaged", "attached") and row["signature_digest"] == cluster_id:
                pass
            else:
                if row["status"] in ("triaged", "attached") and row["signature_digest"]:
                    self._db.execute("UPDATE clusters SET count = count - 1 WHERE cluster_id = ?",
                                     (row["signature_digest"],))
                self._db.execute("UPDATE findings SET signature_digest = ?, status = 'attached', error = NULL "
                                 "WHERE finding_id = ?", (cluster_id, finding_id))
                self._db.execute("UPDATE clusters SET count = count + 1, last_seen = ? WHERE cluster_id = ?",
                                 (now, cluster_id))
        cluster = self.cluster(cluster_id)
        assert cluster is not None
        return cluster

    def set_repro_status(self, cluster_id: str, status: str, detail: str = "") -> None:
        if status not in ("unchecked", "reproduced", "unreproduced"):
            raise ValueError(f"unknown repro status {status!r}")
        self._db.execute("UPDATE clusters SET repro_status = ?, repro_detail = ? WHERE cluster_id = ?",
                         (status, detail[:2000], cluster_id))

    def finding_counts(self) -> dict[str, int]:
        """{status: count}, with `failed` counting the waiting findings whose last triage failed."""
        out: dict[str, int] = {}
        for r in self._db.execute("SELECT status, error IS NOT NULL AS failed, COUNT(*) AS n FROM findings "
                                  "GROUP BY status, failed"):
            key = "failed" if r["status"] == "new" and r["failed"] else r["status"]
            out[key] = out.get(key, 0) + int(r["n"])
        return out

    def mark_failed(self, finding_id: int, error: str) -> None:
        """Note why triage failed; the finding stays `new` so the next run tries again."""
        self._db.execute("UPDATE findings SET error = ? WHERE finding_id = ?", (error[:2000], finding_id))

    # -- clusters -------------------------------------------------------------------------------
    def set_cluster_note(self, cluster_id: str, *, llm_title: str | None, hypothesis: str | None, model: str) -> None:
        """What the triage LLM wrote about a cluster (already checked by triage.llm_triage)."""
        self._db.execute("UPDATE clusters SET llm_title = ?, hypothesis = ?, llm_model = ? WHERE cluster_id = ?",
                         (llm_title, hypothesis, model, cluster_id))

    def assign_cluster(self, finding_id: int, cluster_id: str, signature: Signature, *, title: str,
                       reduced_folder: str | os.PathLike | None = None, representative: bool = False) -> Cluster:
        """Put a finding into cluster `cluster_id` (opening it with `signature` and `title` when
        it does not exist yet) and mark the finding triaged, in one transaction.

        `representative`: the finding's reduced case now stands for the cluster (the first
        finding of a new cluster always does).
        """
        now = time.time()
        with self._tx():
            exists = self._db.execute("SELECT 1 FROM clusters WHERE cluster_id = ?", (cluster_id,)).fetchone()
            if exists is None:
                self._db.execute(
                    "INSERT INTO clusters (cluster_id, title, signature_json, representative, count, first_seen, last_seen) "
                    "VALUES (?, ?, ?, ?, 0, ?, ?)",
                    (cluster_id, title, json.dumps(signature.to_json(), sort_keys=True), finding_id, now, now))
            elif representative:
                self._db.execute("UPDATE clusters SET representative = ?, title = ? WHERE cluster_id = ?",
                                 (finding_id, title, cluster_id))
            already = self._db.execute("SELECT signature_digest, status FROM findings WHERE finding_id = ?",
                                       (finding_id,)).fetchone()
            if already is None:
                raise KeyError(f"no finding {finding_id} in {self.path}")
            counted = already["status"] in ("triaged", "attached") and already["signature_digest"] == cluster_id
            if already["status"] in ("triaged", "attached") and already["signature_digest"] \
                    and already["signature_digest"] != cluster_id:  # moved: it no longer counts where it was
                self._db.execute("UPDATE clusters SET count = count - 1 WHERE cluster_id = ?",
                                 (already["signature_digest"],))
            self._db.execute("UPDATE findings SET signature_digest = ?, reduced_folder = ?, status = 'triaged', error = NULL "
                             "WHERE finding_id = ?",
                             (cluster_id, None if reduced_folder is None else str(reduced_folder), finding_id))
            if not counted:
                self._db.execute("UPDATE clusters SET count = count + 1, last_seen = ? WHERE cluster_id = ?",
                                 (now, cluster_id))
        cluster = self.cluster(cluster_id)
        assert cluster is not None
        return cluster

    def clusters(self) -> list[Cluster]:
        rows = self._db.execute("SELECT * FROM clusters ORDER BY first_seen, cluster_id").fetchall()
        return [_cluster(r) for r in rows]

    def cluster(self, cluster_id: str) -> Cluster | None:
        """The cluster with this id, or with an id starting with it when that is unambiguous."""
        row = self._db.execute("SELECT * FROM clusters WHERE cluster_id = ?", (cluster_id,)).fetchone()
        if row is None and cluster_id:
            rows = self._db.execute("SELECT * FROM clusters WHERE cluster_id LIKE ?", (cluster_id + "%",)).fetchall()
            row = rows[0] if len(rows) == 1 else None
        return None if row is None else _cluster(row)

    def cluster_records(self) -> list[ClusterRecord]:
        """What `triage.cluster.choose_cluster` needs to decide where a new signature goes."""
        return [c.record() for c in self.clusters()]


class _Transaction:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        self.db.execute("ROLLBACK" if exc_type is not None else "COMMIT")


def _finding(row: sqlite3.Row) -> Finding:
    return Finding(finding_id=int(row["finding_id"]), case_id=row["case_id"], case_folder=row["case_folder"],
                   target=row["target"], verdict=Verdict.from_json(json.loads(row["verdict_json"])),
                   signature_digest=row["signature_digest"], reduced_folder=row["reduced_folder"],
                   status=row["status"], error=row["error"], created=float(row["created"]),
                   pkey=row["pkey"] if "pkey" in row.keys() else None)


def _cluster(row: sqlite3.Row) -> Cluster:
    return Cluster(cluster_id=row["cluster_id"], title=row["title"],
                   signature=Signature.from_json(json.loads(row["signature_json"])),
                   representative=row["representative"], count=int(row["count"]),
                   first_seen=float(row["first_seen"]), last_seen=float(row["last_seen"]),
                   repro_status=(row["repro_status"] if "repro_status" in row.keys() else None) or "unchecked",
                   repro_detail=(row["repro_detail"] if "repro_detail" in row.keys() else None) or "",
                   llm_title=row["llm_title"] if "llm_title" in row.keys() else None,
                   hypothesis=row["hypothesis"] if "hypothesis" in row.keys() else None,
                   llm_model=row["llm_model"] if "llm_model" in row.keys() else None)


def iter_case_folders(root: str | os.PathLike) -> Iterator[Path]:
    """Every TestCase folder (one holding program.py) at or below `root`, in sorted order."""
    root = Path(root)
    if (root / "program.py").is_file():
        yield root
        return
    for p in sorted(root.rglob("program.py")):
        yield p.parent

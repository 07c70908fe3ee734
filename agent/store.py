"""The campaign store: one SQLite file (WAL) in the campaign folder, and the one module that
knows its schema: every table, index and added column is declared here, and every query any
part of NNForge (campaign, triage, reports, benchmarks) runs against it is a method here.

Why a finding is written before anything is done with it: reduction and triage take minutes and
run untrusted programs; if the process is killed half-way, the finding must still be there (with
status `new`) for the next `nnforge triage` to pick up. Findings are also written as plain
folders a human can read (`findings/<cluster_id>/`), by `nnforge triage`, not by the store.

Three ways in:

- `Store`: tests, findings and clusters, what `nnforge triage` needs (the base tables).
- `CampaignStore(Store)`: the same file plus the campaign's tables and columns, each created if
  missing, so a store written by `nnforge triage` can become a campaign's and back.
  `StoreLLMCache` keeps the campaign's LLM replies in it on a connection of its own.
- `StoreReader`: what the summary, the HTML report (`report_data.py`) and the benchmarks show. It
  opens its own connection and only SELECTs, so it can run while a campaign writes (WAL), and it
  reads any store: a finished campaign, one still running, an empty one, or one written by an
  older NNForge or by `nnforge triage` (no campaign tables or columns). Every table and column is
  looked up before it is read, and what is missing reads as empty rather than raising.

Tables and columns:

- `meta`: key/value text. `schema_version`, `created` (epoch seconds); a campaign adds
  `campaign_config` (JSON), `campaign_started`, `campaign_elapsed_s`, `campaign_next_seed`,
  `campaign_next_test`, `campaign_runs` (JSON list, one entry per start), `campaign_status`
  (running | finished | interrupted), `scheduler_state` (JSON), and what its setup found
  (`sandbox`, `export_table`, `export_gate`).
- `tests`: one row per case and target, the latest verdict: `case_id`, `folder`, `origin`,
  `target`, `symptom`, `rung`, `verdict_json`, `created`. A campaign adds: `source`, `mutator`,
  `category`, `arm`, `t_generate`, `t_mutate`, `t_search`, `t_oracle` (seconds per stage),
  `elapsed_s` (campaign time when the verdict came), `novel` (1 when the scheduler was rewarded:
  new behaviour), `test_no`, `graph_breaks` and `recompiles` (JSON lists of the reasons Dynamo
  recorded for the test, torch.compile targets only: oracle/dynamo_record.py), `value_bin` (the
  value bin the scheduler drew the test's values from, oracle/value_bins.py; NULL with bins off)
  and `value_bin_kept` (1 when the values kept its property through value search, 0 when they
  had to leave it), `calls_kind` ("forward" or "forward + backward": whether the test's calls ran
  a backward), `programs` (generator programs in the test: a pack's members, generator/pack.py;
  else 1), `t_worker` (seconds its worker calls took: what the test cost the workers; `t_oracle`
  is the wall time of the oracle's thread, which also waits for a free worker). `origin` holds
  the seed source as well.
- `findings`: one row per bug verdict (case and target): `status` (new | triaged | attached),
  `signature_digest` (its cluster, once triaged or attached), `reduced_folder`, `error` (why
  the last triage failed), `pkey` (provisional root-cause key, triage/rootcause.py).
- `clusters`: one row per bug class: `title`, `signature_json`, `representative` (a finding
  id), `count`, `first_seen`, `last_seen`, `repro_status` (unchecked | reproduced |
  unreproduced) and `repro_detail`, and what the triage LLM wrote (`llm_title`, `hypothesis`,
  `llm_model`).
- `queue` (campaign): every test the campaign decided to run, written (with its case folder)
  BEFORE the test runs: `test_no` (order), `case_id`, `target`, `folder`, `source` (seed source:
  generator | history), `mutator` (NULL for a plain seed), `category` (root-cause category or
  "seed"), `arm` (the scheduler arm, "source|category|target"), `seed_no`, `status`
  (queued | done), `t_generate`, `t_mutate` (seconds), `created`. After a kill, rows still
  `queued` are the tests that were in flight (or made ahead while every worker was busy): a
  resumed campaign runs them again.
- `llm_cache` (campaign): the campaign's LLM replies by prompt hash (`key`, `model`, `purpose`,
  `tokens`, `created`, `reply`), so DIR holds them and a resumed campaign asks the model nothing
  twice (`StoreLLMCache`, the cache `core.llm.LLMClient` uses in a campaign).
- `stats` (campaign): one row every ~10 s: ts, elapsed_s, tests, tests_per_min, bugs, clusters,
  invalid, worker_restarts, timeouts, segfaults, rss_mb (max worker RSS), covered_lines (NULL
  without coverage), json (everything else: verdict counts per target, scheduler summary, ...).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from nnforge.core.signature import Signature
from nnforge.core.verdict import BUG_SYMPTOMS, Verdict
from nnforge.triage.cluster import ClusterRecord

STORE_FILE = "store.sqlite"
SCHEMA_VERSION = "1"

# The error any store operation may raise (callers need not import sqlite3 to catch it).
StoreError = sqlite3.Error

# -- the schema ---------------------------------------------------------------------------------
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

# Columns later versions added to the base tables: a store made by an older NNForge gains them on open.
_ADDED_COLUMNS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("findings", (("pkey", "TEXT"),)),
    ("clusters", (("repro_status", "TEXT NOT NULL DEFAULT 'unchecked'"), ("repro_detail", "TEXT"),
                  ("llm_title", "TEXT"), ("hypothesis", "TEXT"), ("llm_model", "TEXT"))),
)

_LLM_CACHE_TABLE = """
CREATE TABLE IF NOT EXISTS llm_cache (
    key TEXT PRIMARY KEY,
    model TEXT,
    purpose TEXT,
    tokens INTEGER,
    created REAL NOT NULL,
    reply TEXT NOT NULL
);
"""

_CAMPAIGN_SCHEMA = """
CREATE TABLE IF NOT EXISTS queue (
    test_no INTEGER PRIMARY KEY,
    case_id TEXT NOT NULL,
    target TEXT NOT NULL,
    folder TEXT NOT NULL,
    source TEXT,
    mutator TEXT,
    category TEXT,
    arm TEXT,
    seed_no INTEGER,
    status TEXT NOT NULL DEFAULT 'queued',
    t_generate REAL,
    t_mutate REAL,
    created REAL NOT NULL,
    UNIQUE (case_id, target)
);
CREATE INDEX IF NOT EXISTS queue_status ON queue (status);
CREATE TABLE IF NOT EXISTS stats (
    ts REAL NOT NULL,
    elapsed_s REAL NOT NULL,
    tests INTEGER NOT NULL,
    tests_per_min REAL,
    bugs INTEGER,
    clusters INTEGER,
    invalid INTEGER,
    worker_restarts INTEGER,
    timeouts INTEGER,
    segfaults INTEGER,
    rss_mb REAL,
    covered_lines INTEGER,
    json TEXT
);
""" + _LLM_CACHE_TABLE

# Columns a campaign adds to the base `tests` table.
TEST_COLUMNS = (("source", "TEXT"), ("mutator", "TEXT"), ("category", "TEXT"), ("arm", "TEXT"),
                ("t_generate", "REAL"), ("t_mutate", "REAL"), ("t_search", "REAL"), ("t_oracle", "REAL"),
                ("elapsed_s", "REAL"), ("novel", "INTEGER"), ("test_no", "INTEGER"), ("graph_breaks", "TEXT"),
                ("recompiles", "TEXT"), ("value_bin", "TEXT"), ("value_bin_kept", "INTEGER"), ("calls_kind", "TEXT"),
                ("programs", "INTEGER"), ("t_worker", "REAL"))

STATS_COLUMNS = ("ts", "elapsed_s", "tests", "tests_per_min", "bugs", "clusters", "invalid", "worker_restarts",
                 "timeouts", "segfaults", "rss_mb", "covered_lines", "json")


def store_file(store_or_path: Any) -> Path:
    """The SQLite file of a Store, a campaign folder or the file itself."""
    p = Path(getattr(store_or_path, "path", store_or_path))
    return p if p.suffix == ".sqlite" else p / STORE_FILE


def is_disk_full(e: BaseException) -> bool:
    """Is `e` SQLite saying the disk is full? (A campaign stops cleanly on it rather than crash.)"""
    return isinstance(e, sqlite3.OperationalError) and "full" in str(e).lower()


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
        for table, columns in _ADDED_COLUMNS:
            self._add_columns(table, columns)
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
        return _count(self._db, "tests")

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


# -- queries both the store and the reader run ---------------------------------------------------
def _count(con: sqlite3.Connection, table: str) -> int:
    return int(con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def _verdict_counts(con: sqlite3.Connection) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in con.execute("SELECT target, symptom, COUNT(*) AS n FROM tests GROUP BY target, symptom"):
        out.setdefault(r["target"], {})[r["symptom"]] = int(r["n"])
    return out


def _stats_rows(con: sqlite3.Connection, order: str) -> list[dict[str, Any]]:
    """The stats timeline in `order`, every column, `json` decoded ({} when empty or unreadable)."""
    out = []
    for r in con.execute(f"SELECT * FROM stats ORDER BY {order}").fetchall():
        d = dict(r)
        raw = d.get("json")
        try:
            d["json"] = json.loads(raw) if isinstance(raw, str) and raw else {}
        except ValueError:
            d["json"] = {}
        out.append(d)
    return out


# -- what a campaign adds: the queue, per-test columns, the stats timeline, the LLM cache ---------
@dataclass(frozen=True)
class QueuedTest:
    """A test the campaign decided to run: the case is in `folder`, its verdict may not be."""

    test_no: int
    case_id: str
    target: str
    folder: str
    source: str
    mutator: str | None
    category: str
    arm: str
    seed_no: int | None
    t_generate: float
    t_mutate: float

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class CampaignStore(Store):
    """Store plus the campaign's queue, per-test columns and stats timeline."""

    def __init__(self, path: str | os.PathLike):
        super().__init__(path)
        self._db.executescript(_CAMPAIGN_SCHEMA)
        self._add_columns("tests", TEST_COLUMNS)

    # -- meta as JSON -------------------------------------------------------------------------------
    def get_json(self, key: str, default: Any = None) -> Any:
        raw = self.get_meta(key)
        if raw is None:
            return default
        try:
            return json.loads(raw)
        except ValueError:
            return default

    def set_json(self, key: str, value: Any) -> None:
        self.set_meta(key, json.dumps(value, sort_keys=True, default=str))

    # -- the queue ----------------------------------------------------------------------------------
    def has_test(self, case_id: str, target: str) -> bool:
        """Was this case already queued (run or in flight) on this target?"""
        row = self._db.execute("SELECT 1 FROM queue WHERE case_id = ? AND target = ?", (case_id, target)).fetchone()
        return row is not None

    def enqueue(self, test: QueuedTest) -> None:
        self._db.execute(
            "INSERT INTO queue (test_no, case_id, target, folder, source, mutator, category, arm, seed_no, status, "
            "t_generate, t_mutate, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
            (test.test_no, test.case_id, test.target, test.folder, test.source, test.mutator, test.category, test.arm,
             test.seed_no, test.t_generate, test.t_mutate, time.time()))

    def pending(self) -> list[QueuedTest]:
        """Tests queued but without a verdict (in flight when the campaign stopped), oldest first."""
        rows = self._db.execute("SELECT * FROM queue WHERE status = 'queued' ORDER BY test_no").fetchall()
        return [QueuedTest(test_no=int(r["test_no"]), case_id=r["case_id"], target=r["target"], folder=r["folder"],
                           source=r["source"] or "", mutator=r["mutator"], category=r["category"] or "seed",
                           arm=r["arm"] or "", seed_no=r["seed_no"], t_generate=float(r["t_generate"] or 0.0),
                           t_mutate=float(r["t_mutate"] or 0.0)) for r in rows]

    def max_test_no(self) -> int:
        row = self._db.execute("SELECT MAX(test_no) FROM queue").fetchone()
        return int(row[0]) if row[0] is not None else -1

    # -- one verdict --------------------------------------------------------------------------------
    def record_verdict(self, test: QueuedTest, verdict: Verdict, *, t_search: float, t_oracle: float,
                       elapsed_s: float, novel: bool, compiler: dict[str, list[str]] | None = None,
                       pkey: str | None = None, value_bin: str | None = None,
                       value_bin_kept: bool | None = None, calls_kind: str | None = None,
                       programs: int = 1, t_worker: float | None = None) -> int | None:
        """Write the test's verdict, its finding when it is a bug, and mark the queue row done, in
        one transaction: a finding is in the store before anything else is done with it.
        `compiler`: {"graph_breaks": [...], "recompiles": [...]} Dynamo recorded (NULL columns without).
        Returns the finding id (None when not a bug)."""
        now = time.time()
        finding_id = None
        gb = rc = None
        if compiler is not None:
            gb = json.dumps(list(compiler.get("graph_breaks") or ()))
            rc = json.dumps(list(compiler.get("recompiles") or ()))
        with self._tx():
            self._db.execute(
                "INSERT INTO tests (case_id, folder, origin, target, symptom, rung, verdict_json, created, source, "
                "mutator, category, arm, t_generate, t_mutate, t_search, t_oracle, elapsed_s, novel, test_no, "
                "graph_breaks, recompiles, value_bin, value_bin_kept, calls_kind, programs, t_worker) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(case_id, target) DO UPDATE SET folder = excluded.folder, origin = excluded.origin, "
                "symptom = excluded.symptom, rung = excluded.rung, verdict_json = excluded.verdict_json, "
                "created = excluded.created, source = excluded.source, mutator = excluded.mutator, "
                "category = excluded.category, arm = excluded.arm, t_generate = excluded.t_generate, "
                "t_mutate = excluded.t_mutate, t_search = excluded.t_search, t_oracle = excluded.t_oracle, "
                "elapsed_s = excluded.elapsed_s, novel = excluded.novel, test_no = excluded.test_no, "
                "graph_breaks = excluded.graph_breaks, recompiles = excluded.recompiles, "
                "value_bin = excluded.value_bin, value_bin_kept = excluded.value_bin_kept, "
                "calls_kind = excluded.calls_kind, programs = excluded.programs, t_worker = excluded.t_worker",
                (test.case_id, test.folder, test.source, verdict.target, verdict.symptom.value, verdict.rung,
                 verdict.dumps(), now, test.source, test.mutator, test.category, test.arm, test.t_generate,
                 test.t_mutate, t_search, t_oracle, elapsed_s, int(novel), test.test_no, gb, rc, value_bin,
                 None if value_bin_kept is None else int(value_bin_kept), calls_kind, int(programs), t_worker))
            if verdict.is_bug:
                self._db.execute(
                    "INSERT OR IGNORE INTO findings (case_id, case_folder, target, verdict_json, status, created, pkey) "
                    "VALUES (?, ?, ?, ?, 'new', ?, ?)",
                    (test.case_id, test.folder, verdict.target, verdict.dumps(), now, pkey))
                row = self._db.execute("SELECT finding_id FROM findings WHERE case_id = ? AND target = ?",
                                       (test.case_id, verdict.target)).fetchone()
                finding_id = int(row["finding_id"])
            self._db.execute("UPDATE queue SET status = 'done' WHERE test_no = ?", (test.test_no,))
        return finding_id

    # -- counts for status and stats ---------------------------------------------------------------
    def verdict_counts(self) -> dict[str, dict[str, int]]:
        """{target: {symptom: count}} over every recorded test."""
        return _verdict_counts(self._db)

    def findings_count(self) -> int:
        return _count(self._db, "findings")

    def clusters_count(self) -> int:
        return _count(self._db, "clusters")

    def arm_of_finding(self, finding_id: int) -> str | None:
        """The scheduler arm whose test recorded the finding."""
        row = self._db.execute("SELECT t.arm FROM findings f JOIN tests t ON t.case_id = f.case_id AND "
                               "t.target = f.target WHERE f.finding_id = ?", (finding_id,)).fetchone()
        return row["arm"] if row is not None else None

    def latest_finding(self) -> dict[str, Any] | None:
        row = self._db.execute("SELECT f.finding_id, f.case_id, f.target, f.verdict_json, f.created, t.category, "
                               "t.mutator FROM findings f LEFT JOIN tests t ON t.case_id = f.case_id AND "
                               "t.target = f.target ORDER BY f.finding_id DESC LIMIT 1").fetchone()
        if row is None:
            return None
        v = json.loads(row["verdict_json"])
        return {"finding_id": row["finding_id"], "case_id": row["case_id"], "target": row["target"],
                "symptom": v.get("symptom"), "rung": v.get("rung"), "exc_type": v.get("exc_type"),
                "category": row["category"], "mutator": row["mutator"], "created": row["created"]}

    # -- the stats timeline -------------------------------------------------------------------------
    def add_stats(self, row: dict[str, Any]) -> None:
        values = [row.get(c) for c in STATS_COLUMNS]
        values[STATS_COLUMNS.index("json")] = json.dumps(row.get("json") or {}, sort_keys=True, default=str)
        self._db.execute(f"INSERT INTO stats ({', '.join(STATS_COLUMNS)}) VALUES ({', '.join('?' * len(STATS_COLUMNS))})",
                         values)

    def stats_rows(self) -> list[dict[str, Any]]:
        return _stats_rows(self._db, "ts")

    # -- the LLM cache ------------------------------------------------------------------------------
    def llm_cache(self) -> "StoreLLMCache":
        """An `LLMCache` (core/llm.py) over this store's `llm_cache` table, usable from any thread."""
        return StoreLLMCache(self.path)

    def llm_cache_count(self) -> int:
        return _count(self._db, "llm_cache")


class StoreLLMCache:
    """LLM replies kept in the campaign store (table `llm_cache`), keyed by `core.llm.cache_key`.

    It has its own connection (the store's is the campaign loop's; mutators and triage may call
    from other threads), guarded by a lock; WAL lets it read and write beside the loop's writes.
    A failed read is a miss and a failed write is logged by the client: a cache never fails a call.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _con(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            self._db.execute(_LLM_CACHE_TABLE.strip())
        return self._db

    def get(self, key: str) -> str | None:
        with self._lock:
            try:
                row = self._con().execute("SELECT reply FROM llm_cache WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error:
                return None
        return None if row is None else str(row[0])

    def put(self, key: str, record: dict[str, Any]) -> None:
        with self._lock:
            self._con().execute(
                "INSERT OR REPLACE INTO llm_cache (key, model, purpose, tokens, created, reply) VALUES (?, ?, ?, ?, ?, ?)",
                (key, record.get("model"), record.get("purpose"), int(record.get("tokens") or 0),
                 float(record.get("created") or time.time()), str(record["reply"])))

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


# -- reading any store, read-only -----------------------------------------------------------------
class StoreReader:
    """Named read-only queries over a store of any age (see the module docstring).

    Each method looks up the tables and columns it needs first and answers empty (0, {}, [] or
    None, as its docstring says) when they are missing, so a report renders for a store written
    by `nnforge triage`, by an older NNForge, or by a campaign that has only just started.
    `path`: a Store, a campaign folder or the .sqlite file. `read_only`: open with SQLite's
    read-only mode, so a missing file raises `StoreError` instead of being created empty (what a
    watcher polling a campaign that has not started yet needs).
    """

    def __init__(self, path: Any, *, read_only: bool = False, timeout: float = 30.0):
        self.path = store_file(path)
        if read_only:
            self._con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=timeout)
        else:
            self._con = sqlite3.connect(str(self.path), timeout=timeout)
        self._con.row_factory = sqlite3.Row
        self._tables = {r[0] for r in self._con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        self._cols: dict[str, set[str]] = {}

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> "StoreReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- what the store has ---------------------------------------------------------------------
    def has_table(self, table: str) -> bool:
        return table in self._tables

    def columns(self, table: str) -> set[str]:
        """The table's columns (empty when the table is missing)."""
        if table not in self._cols:
            self._cols[table] = ({r["name"] for r in self._con.execute(f"PRAGMA table_info({table})")}
                                 if table in self._tables else set())
        return self._cols[table]

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return self._con.execute(sql, params).fetchall()

    # -- meta -----------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        if "meta" not in self._tables:
            return None
        row = self._con.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row["value"]

    def meta_json(self, keys: tuple[str, ...]) -> Any:
        """The first of `keys` whose value parses as JSON (older stores used other key names)."""
        for k in keys:
            raw = self.meta(k)
            if raw is None:
                continue
            try:
                return json.loads(raw)
            except ValueError:
                continue
        return None

    # -- tests ----------------------------------------------------------------------------------
    def tests_count(self) -> int:
        return _count(self._con, "tests") if "tests" in self._tables else 0

    def verdict_counts_by_target(self) -> dict[str, dict[str, int]]:
        """{target: {symptom: count}} over every recorded test, in target then symptom order."""
        return _verdict_counts(self._con) if "tests" in self._tables else {}

    def invalid_at_rung_by_target(self, rung: str) -> dict[str, int]:
        """{target: tests judged invalid at `rung`} (a gate rung: the test never reached the target)."""
        if "rung" not in self.columns("tests"):
            return {}
        return {r["target"]: int(r["n"]) for r in self._rows(
            "SELECT target, COUNT(*) AS n FROM tests WHERE symptom = 'invalid' AND rung = ? GROUP BY target", (rung,))}

    def created_span(self) -> tuple[float | None, float | None]:
        """(first, last) `created` time over the tests; (None, None) without tests."""
        if "tests" not in self._tables:
            return None, None
        row = self._rows("SELECT MIN(created) AS first, MAX(created) AS last FROM tests")[0]
        return row["first"], row["last"]

    def max_test_elapsed(self) -> float | None:
        """The latest campaign time a verdict came at; None without the `elapsed_s` column."""
        if "elapsed_s" not in self.columns("tests"):
            return None
        return float(self._rows("SELECT MAX(elapsed_s) AS m FROM tests")[0]["m"] or 0.0)

    def programs_total(self) -> int | None:
        """Generator programs over all tests (a row without a value counts as one); None without the column."""
        if "programs" not in self.columns("tests"):
            return None
        return int(self._rows("SELECT SUM(COALESCE(programs, 1)) AS n FROM tests")[0]["n"] or 0)

    def yield_by(self, column: str) -> list[tuple[str, int, int, int, int]]:
        """(value of `column` or "(none)", tests, bug verdicts, invalid, distinct clusters of those
        bugs) per value, most tests first; [] without the column."""
        if column not in self.columns("tests"):
            return []
        bug_list = ", ".join("?" * len(BUG_SYMPTOMS))
        join_clusters = "signature_digest" in self.columns("findings")
        clusters_expr = (f"COUNT(DISTINCT CASE WHEN t.symptom IN ({bug_list}) THEN f.signature_digest END)"
                         if join_clusters else "0")
        join = "LEFT JOIN findings f ON f.case_id = t.case_id AND f.target = t.target" if join_clusters else ""
        sql = (f"SELECT COALESCE(t.{column}, '(none)') AS k, COUNT(*) AS n, "
               f"SUM(CASE WHEN t.symptom IN ({bug_list}) THEN 1 ELSE 0 END) AS bugs, "
               f"SUM(CASE WHEN t.symptom = 'invalid' THEN 1 ELSE 0 END) AS invalid, {clusters_expr} AS clusters "
               f"FROM tests t {join} GROUP BY k ORDER BY n DESC, k")
        params = BUG_SYMPTOMS + (BUG_SYMPTOMS if join_clusters else ())  # in SELECT-list order
        return [(str(r["k"]), int(r["n"]), int(r["bugs"] or 0), int(r["invalid"] or 0), int(r["clusters"] or 0))
                for r in self._rows(sql, params)]

    def worker_time_by_kind(self) -> list[tuple[str, int, int, float]]:
        """(kind, tests, programs, worker seconds) per kind of test: "seed" or "mutant", and
        "+ backward" when its calls ran one; [] without the columns it needs (t_oracle, category)."""
        cols = self.columns("tests")
        if not {"t_oracle", "category"} <= cols:
            return []
        backward = "CASE WHEN calls_kind LIKE '%backward%' THEN ' + backward' ELSE '' END" if "calls_kind" in cols else "''"
        programs = "COALESCE(programs, 1)" if "programs" in cols else "1"
        # the workers' own seconds where recorded; older stores have the oracle's wall time only
        cost = "COALESCE(t_worker, t_oracle, 0)" if "t_worker" in cols else "COALESCE(t_oracle, 0)"
        rows = self._rows(f"SELECT (CASE WHEN COALESCE(category, 'seed') = 'seed' THEN 'seed' ELSE 'mutant' END) "
                          f"|| {backward} AS kind, COUNT(*) AS n, SUM({programs}) AS p, SUM({cost}) AS s "
                          f"FROM tests GROUP BY kind ORDER BY s DESC")
        return [(str(r["kind"]), int(r["n"]), int(r["p"] or 0), float(r["s"] or 0.0)) for r in rows]

    def value_bin_kept(self) -> dict[str, tuple[int, int]]:
        """{value bin: (tests whose values kept its property, tests where that is known)}; {} without the column."""
        if "value_bin_kept" not in self.columns("tests"):
            return {}
        rows = self._rows("SELECT value_bin AS b, SUM(CASE WHEN value_bin_kept = 1 THEN 1 ELSE 0 END) AS kept, "
                          "COUNT(value_bin_kept) AS known FROM tests WHERE value_bin IS NOT NULL GROUP BY value_bin")
        return {str(r["b"]): (int(r["kept"] or 0), int(r["known"] or 0)) for r in rows}

    def stage_sums(self, stages: tuple[str, ...]) -> dict[str, float]:
        """{stage: seconds over all tests} for each stage whose `t_<stage>` column exists."""
        cols = self.columns("tests")
        present = [s for s in stages if f"t_{s}" in cols]
        if not present:
            return {}
        row = self._rows("SELECT " + ", ".join(f"SUM(t_{s}) AS {s}" for s in present) + " FROM tests")[0]
        return {s: float(row[s] or 0.0) for s in present}

    def symptoms_by_elapsed(self) -> list[tuple[float, str]]:
        """(campaign seconds, symptom) per test that has them, in time order; [] without `elapsed_s`."""
        if "elapsed_s" not in self.columns("tests"):
            return []
        rows = self._rows("SELECT elapsed_s AS t, symptom FROM tests WHERE elapsed_s IS NOT NULL ORDER BY elapsed_s")
        return [(float(r["t"]), r["symptom"]) for r in rows]

    def symptoms_by_created(self) -> list[tuple[float, str]]:
        """(epoch seconds recorded, symptom) per test, in time order; [] without tests."""
        if "tests" not in self._tables:
            return []
        return [(float(r["t"]), r["symptom"]) for r in self._rows("SELECT created AS t, symptom FROM tests ORDER BY created")]

    def compiler_records(self) -> list[tuple[str, str | None, str | None]] | None:
        """(target, graph_breaks JSON, recompiles JSON) per test that recorded either; None when
        the store has no such columns (it records no graph breaks or recompiles)."""
        cols = self.columns("tests")
        if "graph_breaks" not in cols or "recompiles" not in cols:
            return None
        return [(r["target"], r["graph_breaks"], r["recompiles"]) for r in self._rows(
            "SELECT target, graph_breaks, recompiles FROM tests WHERE graph_breaks IS NOT NULL OR recompiles IS NOT NULL")]

    # -- findings and clusters ------------------------------------------------------------------
    def findings_count(self) -> int:
        return _count(self._con, "findings") if "findings" in self._tables else 0

    def findings_by_status(self) -> list[tuple[str, int]]:
        """(status, findings) per status; a store without the column counts every finding `new`."""
        if "findings" not in self._tables:
            return []
        rows = self._rows("SELECT status, COUNT(*) AS n FROM findings GROUP BY status" if "status" in self.columns("findings")
                          else "SELECT 'new' AS status, COUNT(*) AS n FROM findings")
        return [(str(r["status"]), int(r["n"])) for r in rows]

    def failed_count(self) -> int | None:
        """Waiting findings whose last triage failed; None when the store does not record failures."""
        cols = self.columns("findings")
        if "error" not in cols or "status" not in cols:
            return None
        return int(self._rows("SELECT COUNT(*) AS n FROM findings WHERE status = 'new' AND error IS NOT NULL")[0]["n"])

    def waiting_by_key(self) -> list[tuple[str, int]]:
        """(provisional key, waiting findings), largest group first; [] without the `pkey` column."""
        if "pkey" not in self.columns("findings"):
            return []
        rows = self._rows("SELECT COALESCE(pkey, '(no key yet)') AS k, COUNT(*) AS n FROM findings WHERE status = 'new' "
                          "GROUP BY k ORDER BY n DESC, k")
        return [(str(r["k"]), int(r["n"])) for r in rows]

    def finding_cases(self) -> list[tuple[str | None, str, str | None]]:
        """(case folder, target, cluster id) of every finding, oldest first."""
        if "findings" not in self._tables:
            return []
        return [(r["case_folder"], r["target"], r["signature_digest"]) for r in self._rows(
            "SELECT case_folder, target, signature_digest FROM findings ORDER BY finding_id")]

    def cluster_rows(self) -> list[dict[str, Any]]:
        """Every cluster row as a dict of whatever columns the store has, oldest first."""
        if "clusters" not in self._tables:
            return []
        order = "first_seen, cluster_id" if "first_seen" in self.columns("clusters") else "cluster_id"
        return [dict(r) for r in self._rows(f"SELECT * FROM clusters ORDER BY {order}")]

    def cluster_targets(self, cluster_id: str) -> tuple[str, ...]:
        """The targets the cluster's findings came from, sorted; () when findings name no cluster."""
        if "signature_digest" not in self.columns("findings"):
            return ()
        return tuple(r["target"] for r in self._rows(
            "SELECT DISTINCT target FROM findings WHERE signature_digest = ? ORDER BY target", (cluster_id,)))

    def attached_count(self, cluster_id: str) -> int:
        """Findings counted into the cluster without a reduction of their own."""
        cols = self.columns("findings")
        if "signature_digest" not in cols or "status" not in cols:
            return 0
        return int(self._rows("SELECT COUNT(*) AS n FROM findings WHERE signature_digest = ? AND status = 'attached'",
                              (cluster_id,))[0]["n"])

    def first_finding_arms(self) -> list[tuple[str, str | None]]:
        """(cluster id, scheduler arm of the test behind its first finding) per cluster; [] when
        the store has no arms or no cluster ids on findings."""
        if "arm" not in self.columns("tests") or "signature_digest" not in self.columns("findings"):
            return []
        rows = self._rows("SELECT f.signature_digest AS cid, t.arm AS arm FROM findings f JOIN tests t "
                          "ON t.case_id = f.case_id AND t.target = f.target WHERE f.signature_digest IS NOT NULL "
                          "AND f.finding_id = (SELECT MIN(g.finding_id) FROM findings g "
                          "WHERE g.signature_digest = f.signature_digest)")
        return [(r["cid"], r["arm"]) for r in rows]

    # -- the campaign's queue and timeline ------------------------------------------------------
    def queue_count(self) -> int:
        """Tests the campaign made (queued, with or without a verdict)."""
        return _count(self._con, "queue") if "queue" in self._tables else 0

    def unrecorded_count(self) -> int:
        """Queued tests with no verdict in `tests` (in flight when the campaign stopped, or lost)."""
        if "queue" not in self._tables or "tests" not in self._tables:
            return self.queue_count()
        return int(self._rows("SELECT COUNT(*) AS n FROM queue q WHERE NOT EXISTS (SELECT 1 FROM tests t WHERE "
                              "t.case_id = q.case_id AND t.target = q.target)")[0]["n"])

    def stats_rows(self) -> list[dict[str, Any]]:
        """The stats timeline, oldest first, every column the store has; `json` decoded ({} when unreadable)."""
        if "stats" not in self._tables:
            return []
        return _stats_rows(self._con, "ts" if "ts" in self.columns("stats") else "rowid")

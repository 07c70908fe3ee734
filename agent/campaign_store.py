"""What a campaign adds to the store: the test queue, per-test campaign columns, the stats timeline.

Same SQLite file as `agent/store.py` (`Store`); this subclass only adds tables and columns, each
created if missing, so a store written by `nnforge triage` can become a campaign's and back.

Tables and columns (the HTML report and summary read them):

- `queue`: every test the campaign decided to run, written (with its case folder) BEFORE the
  test runs: `test_no` (order), `case_id`, `target`, `folder`, `source` (seed source:
  generator | history), `mutator` (NULL for a plain seed), `category` (root-cause category or
  "seed"), `arm` (the scheduler arm, "source|category|target"), `seed_no`, `status`
  (queued | done), `t_generate`, `t_mutate` (seconds), `created`. After a kill, rows still
  `queued` are the tests that were in flight: a resumed campaign runs them again.
- `tests` (base table of Store) gains: `source`, `mutator`, `category`, `arm`, `t_generate`,
  `t_mutate`, `t_search`, `t_oracle` (seconds per stage), `elapsed_s` (campaign time when the
  verdict came), `novel` (1 when the scheduler was rewarded: new behaviour), `test_no`,
  `graph_breaks` and `recompiles` (JSON lists of the reasons Dynamo recorded for the test,
  torch.compile targets only: oracle/dynamo_record.py), `value_bin` (the value bin the scheduler
  drew the test's values from, oracle/value_bins.py; NULL with bins off) and `value_bin_kept` (1
  when the values kept its property through value search, 0 when they had to leave it),
  `calls_kind` ("forward" or "forward + backward": whether the test's calls ran a backward),
  `programs` (generator programs in the test: a pack's members, generator/pack.py; else 1).
  `origin` holds the seed source as well.
- `llm_cache`: the campaign's LLM replies by prompt hash (`key`, `model`, `purpose`, `tokens`,
  `created`, `reply`), so DIR holds them and a resumed campaign asks the model nothing twice
  (`StoreLLMCache`, the cache `core.llm.LLMClient` uses in a campaign).
- `stats`: one row every ~10 s: ts, elapsed_s, tests, tests_per_min, bugs, clusters, invalid,
  worker_restarts, timeouts, segfaults, rss_mb (max worker RSS), covered_lines (NULL without
  coverage), json (everything else: verdict counts per target, scheduler summary, ...).
- `meta` keys: `campaign_config` (JSON), `campaign_started`, `campaign_elapsed_s`,
  `campaign_next_seed`, `campaign_next_test`, `campaign_runs` (JSON list, one entry per start),
  `campaign_status` (running | finished | interrupted), `scheduler_state` (JSON).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any

from nnforge.agent.store import Store
from nnforge.core.verdict import Verdict

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
CREATE TABLE IF NOT EXISTS llm_cache (
    key TEXT PRIMARY KEY,
    model TEXT,
    purpose TEXT,
    tokens INTEGER,
    created REAL NOT NULL,
    reply TEXT NOT NULL
);
"""

# Columns a campaign adds to Store's `tests` table.
TEST_COLUMNS = (("source", "TEXT"), ("mutator", "TEXT"), ("category", "TEXT"), ("arm", "TEXT"),
                ("t_generate", "REAL"), ("t_mutate", "REAL"), ("t_search", "REAL"), ("t_oracle", "REAL"),
                ("elapsed_s", "REAL"), ("novel", "INTEGER"), ("test_no", "INTEGER"), ("graph_breaks", "TEXT"),
                ("recompiles", "TEXT"), ("value_bin", "TEXT"), ("value_bin_kept", "INTEGER"), ("calls_kind", "TEXT"),
                ("programs", "INTEGER"))

STATS_COLUMNS = ("ts", "elapsed_s", "tests", "tests_per_min", "bugs", "clusters", "invalid", "worker_restarts",
                 "timeouts", "segfaults", "rss_mb", "covered_lines", "json")


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
                       programs: int = 1) -> int | None:
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
                "graph_breaks, recompiles, value_bin, value_bin_kept, calls_kind, programs) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(case_id, target) DO UPDATE SET folder = excluded.folder, origin = excluded.origin, "
                "symptom = excluded.symptom, rung = excluded.rung, verdict_json = excluded.verdict_json, "
                "created = excluded.created, source = excluded.source, mutator = excluded.mutator, "
                "category = excluded.category, arm = excluded.arm, t_generate = excluded.t_generate, "
                "t_mutate = excluded.t_mutate, t_search = excluded.t_search, t_oracle = excluded.t_oracle, "
                "elapsed_s = excluded.elapsed_s, novel = excluded.novel, test_no = excluded.test_no, "
                "graph_breaks = excluded.graph_breaks, recompiles = excluded.recompiles, "
                "value_bin = excluded.value_bin, value_bin_kept = excluded.value_bin_kept, "
                "calls_kind = excluded.calls_kind, programs = excluded.programs",
                (test.case_id, test.folder, test.source, verdict.target, verdict.symptom.value, verdict.rung,
                 verdict.dumps(), now, test.source, test.mutator, test.category, test.arm, test.t_generate,
                 test.t_mutate, t_search, t_oracle, elapsed_s, int(novel), test.test_no, gb, rc, value_bin,
                 None if value_bin_kept is None else int(value_bin_kept), calls_kind, int(programs)))
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
        out: dict[str, dict[str, int]] = {}
        for r in self._db.execute("SELECT target, symptom, COUNT(*) AS n FROM tests GROUP BY target, symptom"):
            out.setdefault(r["target"], {})[r["symptom"]] = int(r["n"])
        return out

    def findings_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM findings").fetchone()[0])

    def clusters_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM clusters").fetchone()[0])

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
        rows = self._db.execute(f"SELECT {', '.join(STATS_COLUMNS)} FROM stats ORDER BY ts").fetchall()
        out = []
        for r in rows:
            d = dict(r)
            d["json"] = json.loads(d["json"] or "{}")
            out.append(d)
        return out

    # -- the LLM cache ------------------------------------------------------------------------------
    def llm_cache(self) -> "StoreLLMCache":
        """An `LLMCache` (core/llm.py) over this store's `llm_cache` table, usable from any thread."""
        return StoreLLMCache(self.path)

    def llm_cache_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM llm_cache").fetchone()[0])


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
            self._db.execute("CREATE TABLE IF NOT EXISTS llm_cache (key TEXT PRIMARY KEY, model TEXT, purpose TEXT, "
                             "tokens INTEGER, created REAL NOT NULL, reply TEXT NOT NULL)")
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

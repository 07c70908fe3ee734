"""Everything the campaign summary, the HTML report and the benchmark show, read from the store.

Why a separate reader: the summary (Markdown), the report (HTML) and bench/campaign.py show the
same figures, and each must render for any store: a finished campaign, one still running, an
empty one, or a store written by `nnforge triage` before campaigns existed (no `stats` table, no
campaign columns on `tests`). So every table and column is looked up before it is read, and what
is missing reads as empty rather than raising.

The reader opens its own connection to the store file and only SELECTs, so it can run while a
campaign is writing (WAL).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnforge.core.verdict import Symptom

STAGES = ("generate", "mutate", "search", "oracle")  # tests.t_<stage> columns, in pipeline order
_CONFIG_KEYS = ("campaign_config", "campaign")
_SCHEDULER_KEYS = ("scheduler_state", "scheduler")
_BUG_SYMPTOMS = tuple(s.value for s in Symptom if s.is_bug)


@dataclass(frozen=True)
class YieldRow:
    """Tests of one kind (a category, a target, ...) and what they found."""

    key: str
    tests: int
    bugs: int  # bug verdicts
    invalid: int
    clusters: int  # distinct clusters among those bug verdicts (after triage)

    @property
    def bug_rate(self) -> float:
        return self.bugs / self.tests if self.tests else 0.0

    @property
    def invalid_rate(self) -> float:
        return self.invalid / self.tests if self.tests else 0.0


@dataclass(frozen=True)
class ClusterRow:
    cluster_id: str
    title: str
    count: int
    first_seen_s: float | None  # campaign seconds (wall clock from the start) when first seen
    targets: tuple[str, ...]
    symptom: str
    rung: str | None
    report: str | None  # findings/<id>/report.md relative to the campaign folder, when written
    repro_status: str = "unchecked"  # "reproduced" (listed as a bug) | "unreproduced" | "unchecked"
    repro_detail: str = ""
    attached: int = 0  # findings counted in without their own reduction

    @property
    def listed(self) -> bool:
        """A bug for the morning list: its repro.py exited 1 in a fresh process."""
        return self.repro_status == "reproduced"


@dataclass(frozen=True)
class ArmRow:
    arm: str
    source: str
    category: str
    target: str
    alpha: float
    beta: float
    mean: float
    pulls: int
    rewards: int
    clusters: int = 0  # clusters whose first finding came from a test of this arm
    listed: int = 0  # of those, the ones listed as bugs (repro reproduced)


@dataclass(frozen=True)
class SchedulerView:
    policy: str
    settings: dict[str, Any]  # discount, mutate_prob, prior, covered_lines ...
    arms: tuple[ArmRow, ...]  # by posterior mean, best first
    seen: int  # behaviours seen


@dataclass(frozen=True)
class ReasonRow:
    """One graph-break or recompile reason (normalised: numbers and names as placeholders)."""

    reason: str
    tests: int  # tests that recorded it
    targets: tuple[str, ...]


@dataclass(frozen=True)
class CompilerReasons:
    """What Dynamo recorded over the campaign's torch.compile tests (tests.graph_breaks / recompiles)."""

    tests: int  # tests with a record (torch.compile targets since the columns exist)
    with_graph_breaks: int
    with_recompiles: int
    graph_breaks: tuple[ReasonRow, ...]  # most frequent first
    recompiles: tuple[ReasonRow, ...]


@dataclass(frozen=True)
class CampaignView:
    folder: Path
    status: str | None
    config: dict[str, Any]
    started: float | None  # epoch seconds
    elapsed_s: float
    workers: int
    targets: tuple[str, ...]
    tests: int
    bugs: int
    invalid: int
    verdicts: dict[str, dict[str, int]]  # target -> symptom -> count
    by_category: tuple[YieldRow, ...]
    by_target: tuple[YieldRow, ...]
    by_source: tuple[YieldRow, ...]
    by_mutator: tuple[YieldRow, ...]
    stage_seconds: dict[str, float]  # stage -> total seconds over all tests
    findings: dict[str, int]  # total, new (waiting), triaged (reduced), attached, failed
    clusters: tuple[ClusterRow, ...]
    stats: tuple[dict[str, Any], ...]  # the timeline, oldest first (json column decoded)
    scheduler: SchedulerView | None
    timeline_source: str  # "stats" or "tests" (derived from per-test rows when no stats exist)
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # name -> [(minutes, value)]
    compiler: CompilerReasons | None = None  # None: the store records no graph breaks / recompiles
    waiting: tuple[tuple[str, int], ...] = ()  # (provisional key, findings) still waiting for triage
    sandbox: str | None = None  # the isolation the workers ran under (oracle/sandbox.Isolation.summary)
    export_table: str | None = None  # what ONNX targets' generation skipped (agent/export_probe.py), if any
    export_gate: str | None = None  # what the export gate checked before tests turned away (agent/export_gate.py)
    by_value_bin: tuple[YieldRow, ...] = ()  # per value bin the scheduler drew (empty with bins off)
    value_bin_kept: dict[str, tuple[int, int]] = field(default_factory=dict)  # bin -> (kept its property, known)
    by_calls_kind: tuple[YieldRow, ...] = ()  # forward only vs with a backward
    gated: dict[str, int] = field(default_factory=dict)  # target -> tests stopped by the ONNX export in front of it
    programs: int = 0  # generator programs the tests held (a pack holds several: generator/pack.py); 0: not recorded

    @property
    def bug_clusters(self) -> tuple[ClusterRow, ...]:
        """The clusters listed as bugs: their repro reproduced in a fresh process."""
        return tuple(c for c in self.clusters if c.listed)

    @property
    def tests_per_min(self) -> float:
        return self.tests / (self.elapsed_s / 60.0) if self.elapsed_s >= 1.0 else 0.0  # no rate from a blink

    @property
    def tests_per_min_per_worker(self) -> float:
        return self.tests_per_min / max(1, self.workers)

    @property
    def covered_lines(self) -> int | None:
        pts = self.series.get("covered_lines")
        return int(pts[-1][1]) if pts else None

    @property
    def llm(self) -> dict[str, Any] | None:
        """LLM calls, tokens, failures and fallbacks at the last stats row (None: no LLM mutators)."""
        for row in reversed(self.stats):
            data = row.get("json") if isinstance(row.get("json"), dict) else {}
            if data.get("llm"):
                return dict(data["llm"])
        return None

    def health(self) -> dict[str, Any]:
        """Worker health from the last stats row and the RSS timeline."""
        last = self.stats[-1] if self.stats else {}
        rss = [v for _, v in self.series.get("rss_mb", ())]
        return {"worker_restarts": int(last.get("worker_restarts") or 0), "timeouts": int(last.get("timeouts") or 0),
                "segfaults": int(last.get("segfaults") or 0),
                "rss_first_mb": rss[0] if rss else None, "rss_last_mb": rss[-1] if rss else None,
                "rss_max_mb": max(rss) if rss else None}


# -- reading ------------------------------------------------------------------------------------
class _Db:
    def __init__(self, path: Path):
        self.con = sqlite3.connect(str(path), timeout=30.0)
        self.con.row_factory = sqlite3.Row
        self.tables = {r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        self._cols: dict[str, set[str]] = {}

    def cols(self, table: str) -> set[str]:
        if table not in self._cols:
            self._cols[table] = ({r["name"] for r in self.con.execute(f"PRAGMA table_info({table})")}
                                 if table in self.tables else set())
        return self._cols[table]

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return self.con.execute(sql, params).fetchall()

    def meta(self, key: str) -> str | None:
        if "meta" not in self.tables:
            return None
        row = self.con.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row["value"]

    def meta_json(self, keys: tuple[str, ...]) -> Any:
        for k in keys:
            raw = self.meta(k)
            if raw is None:
                continue
            try:
                return json.loads(raw)
            except ValueError:
                continue
        return None


def store_file(store_or_path: Any) -> Path:
    """The SQLite file of a Store, a campaign folder or the file itself."""
    p = Path(getattr(store_or_path, "path", store_or_path))
    return p if p.suffix == ".sqlite" else p / "store.sqlite"


def load_view(store_or_path: Any, campaign_dir: Path | None = None) -> CampaignView:
    """Read everything the reports show. `store_or_path`: a Store, a campaign folder or the file."""
    path = store_file(store_or_path)
    folder = Path(campaign_dir) if campaign_dir is not None else path.parent
    if not path.is_file():
        return _empty_view(folder)
    db = _Db(path)
    try:
        return _read(db, folder)
    finally:
        db.con.close()


def write_view_file(campaign_dir: Path, store: Any, name: str, render: Any) -> Path:
    """Write DIR/`name` as `render(view)` of the campaign in `store` (a Store, or the folder)."""
    campaign_dir = Path(campaign_dir)
    view = load_view(store, campaign_dir)
    campaign_dir.mkdir(parents=True, exist_ok=True)
    path = campaign_dir / name
    path.write_text(render(view), encoding="utf-8")
    return path


def _float(x: Any) -> float | None:
    try:
        return None if x is None else float(x)
    except (TypeError, ValueError):
        return None


def _read(db: _Db, folder: Path) -> CampaignView:
    config = db.meta_json(_CONFIG_KEYS) or {}
    if not isinstance(config, dict):
        config = {}
    started = _float(db.meta("campaign_started")) or _float(db.meta("created"))
    stats = _stats(db)
    tcols = db.cols("tests")

    tests = invalid = bugs = 0
    verdicts: dict[str, dict[str, int]] = {}
    if "tests" in db.tables:
        for r in db.rows("SELECT target, symptom, COUNT(*) AS n FROM tests GROUP BY target, symptom"):
            verdicts.setdefault(r["target"], {})[r["symptom"]] = int(r["n"])
            tests += int(r["n"])
            invalid += int(r["n"]) if r["symptom"] == Symptom.INVALID.value else 0
            bugs += int(r["n"]) if r["symptom"] in _BUG_SYMPTOMS else 0
    gated: dict[str, int] = {}  # target -> tests that never reached it (invalid at a gate rung)
    if "tests" in db.tables and "rung" in tcols:
        for r in db.rows("SELECT target, COUNT(*) AS n FROM tests WHERE symptom = 'invalid' AND rung = 'onnx_export' "
                         "GROUP BY target"):
            gated[r["target"]] = int(r["n"])

    elapsed = max([_float(db.meta("campaign_elapsed_s")) or 0.0]
                  + [float(r.get("elapsed_s") or 0.0) for r in stats[-1:]]
                  + ([_max_test_elapsed(db)] if "elapsed_s" in tcols else []))
    if elapsed <= 0 and started is not None and tests:
        last = db.rows("SELECT MAX(created) AS m FROM tests")[0]["m"]
        elapsed = max(0.0, float(last or started) - started)

    targets = tuple(config.get("targets") or sorted(verdicts))
    workers = int(config.get("workers") or 1)
    findings = _findings(db)
    clusters = _clusters(db, folder, started)
    series, source = _series(db, stats, clusters, started)
    return CampaignView(
        folder=folder, status=db.meta("campaign_status"), sandbox=db.meta("sandbox"), export_table=db.meta("export_table"),
        export_gate=db.meta("export_gate"), config=config, started=started, elapsed_s=elapsed,
        workers=workers, targets=targets, tests=tests, bugs=bugs, invalid=invalid, verdicts=verdicts, gated=gated,
        by_category=_yield(db, "category"), by_target=_yield(db, "target"),
        by_source=_yield(db, "source" if "source" in tcols else "origin"), by_mutator=_yield(db, "mutator"),
        stage_seconds=_stages(db), findings=findings, clusters=clusters, stats=tuple(stats),
        scheduler=_scheduler(db, clusters), timeline_source=source, series=series, compiler=_compiler_reasons(db),
        waiting=_waiting(db), by_value_bin=tuple(r for r in _yield(db, "value_bin") if r.key != "(none)"),
        value_bin_kept=_bins_kept(db), by_calls_kind=tuple(r for r in _yield(db, "calls_kind") if r.key != "(none)"),
        programs=_programs(db) if "programs" in tcols else 0)


def _programs(db: Any) -> int:
    """Programs over all tests (a row without the column's value counts as one program)."""
    row = db.rows("SELECT SUM(COALESCE(programs, 1)) AS n FROM tests")
    return int(row[0]["n"] or 0) if row else 0


def _max_test_elapsed(db: _Db) -> float:
    row = db.rows("SELECT MAX(elapsed_s) AS m FROM tests")[0]
    return float(row["m"] or 0.0)


def _stats(db: _Db) -> list[dict[str, Any]]:
    if "stats" not in db.tables:
        return []
    order = "ts" if "ts" in db.cols("stats") else "rowid"
    out = []
    for r in db.rows(f"SELECT * FROM stats ORDER BY {order}"):
        d = dict(r)
        raw = d.get("json")
        try:
            d["json"] = json.loads(raw) if isinstance(raw, str) and raw else {}
        except ValueError:
            d["json"] = {}
        out.append(d)
    return out


def _yield(db: _Db, column: str) -> tuple[YieldRow, ...]:
    if "tests" not in db.tables or column not in db.cols("tests"):
        return ()
    bug_list = ", ".join("?" * len(_BUG_SYMPTOMS))
    join_clusters = "findings" in db.tables and "signature_digest" in db.cols("findings")
    clusters_expr = ("COUNT(DISTINCT CASE WHEN t.symptom IN ({b}) THEN f.signature_digest END)".format(b=bug_list)
                     if join_clusters else "0")
    join = "LEFT JOIN findings f ON f.case_id = t.case_id AND f.target = t.target" if join_clusters else ""
    sql = (f"SELECT COALESCE(t.{column}, '(none)') AS k, COUNT(*) AS n, "
           f"SUM(CASE WHEN t.symptom IN ({bug_list}) THEN 1 ELSE 0 END) AS bugs, "
           f"SUM(CASE WHEN t.symptom = 'invalid' THEN 1 ELSE 0 END) AS invalid, {clusters_expr} AS clusters "
           f"FROM tests t {join} GROUP BY k ORDER BY n DESC, k")
    params = _BUG_SYMPTOMS + (_BUG_SYMPTOMS if join_clusters else ())  # in SELECT-list order
    rows = db.rows(sql, params)
    return tuple(YieldRow(key=str(r["k"]), tests=int(r["n"]), bugs=int(r["bugs"] or 0), invalid=int(r["invalid"] or 0),
                          clusters=int(r["clusters"] or 0)) for r in rows)


def _bins_kept(db: _Db) -> dict[str, tuple[int, int]]:
    if "tests" not in db.tables or "value_bin_kept" not in db.cols("tests"):
        return {}
    rows = db.rows("SELECT value_bin AS b, SUM(CASE WHEN value_bin_kept = 1 THEN 1 ELSE 0 END) AS kept, "
                   "COUNT(value_bin_kept) AS known FROM tests WHERE value_bin IS NOT NULL GROUP BY value_bin")
    return {str(r["b"]): (int(r["kept"] or 0), int(r["known"] or 0)) for r in rows}


def _stages(db: _Db) -> dict[str, float]:
    cols = db.cols("tests")
    present = [s for s in STAGES if f"t_{s}" in cols]
    if not present:
        return {}
    row = db.rows("SELECT " + ", ".join(f"SUM(t_{s}) AS {s}" for s in present) + " FROM tests")[0]
    return {s: float(row[s] or 0.0) for s in present}


def _findings(db: _Db) -> dict[str, int]:
    out = {"total": 0, "new": 0, "triaged": 0, "attached": 0, "failed": 0}
    if "findings" not in db.tables:
        return out
    cols = db.cols("findings")
    for r in db.rows("SELECT status, COUNT(*) AS n FROM findings GROUP BY status" if "status" in cols
                     else "SELECT 'new' AS status, COUNT(*) AS n FROM findings"):
        out["total"] += int(r["n"])
        out[str(r["status"])] = out.get(str(r["status"]), 0) + int(r["n"])
    if "error" in cols and "status" in cols:
        out["failed"] = int(db.rows("SELECT COUNT(*) AS n FROM findings WHERE status = 'new' AND error IS NOT NULL")[0]["n"])
    return out


def _clusters(db: _Db, folder: Path, started: float | None) -> tuple[ClusterRow, ...]:
    if "clusters" not in db.tables:
        return ()
    cols = db.cols("clusters")
    order = "first_seen, cluster_id" if "first_seen" in cols else "cluster_id"
    out = []
    have_findings = "findings" in db.tables and "signature_digest" in db.cols("findings")
    for r in db.rows(f"SELECT * FROM clusters ORDER BY {order}"):
        d = dict(r)
        cid = str(d["cluster_id"])
        try:
            sig = json.loads(d.get("signature_json") or "{}")
        except ValueError:
            sig = {}
        targets: tuple[str, ...] = ()
        if have_findings:
            targets = tuple(x["target"] for x in db.rows(
                "SELECT DISTINCT target FROM findings WHERE signature_digest = ? ORDER BY target", (cid,)))
        if not targets and sig.get("target"):
            targets = (str(sig["target"]),)
        first = _float(d.get("first_seen"))
        report = folder / "findings" / cid / "report.md"
        attached = 0
        if have_findings and "status" in db.cols("findings"):
            attached = int(db.rows("SELECT COUNT(*) AS n FROM findings WHERE signature_digest = ? AND status = 'attached'",
                                   (cid,))[0]["n"])
        out.append(ClusterRow(cluster_id=cid, title=str(d.get("llm_title") or d.get("title") or ""), count=int(d.get("count") or 0),
                              first_seen_s=None if first is None or started is None else max(0.0, first - started),
                              targets=targets, symptom=str(sig.get("symptom") or ""), rung=sig.get("rung"),
                              report=f"findings/{cid}/report.md" if report.is_file() else None,
                              repro_status=str(d.get("repro_status") or "unchecked"),
                              repro_detail=str(d.get("repro_detail") or ""), attached=attached))
    return tuple(out)


def _waiting(db: _Db) -> tuple[tuple[str, int], ...]:
    """Waiting findings grouped by provisional key, largest group first."""
    if "findings" not in db.tables or "pkey" not in db.cols("findings"):
        return ()
    rows = db.rows("SELECT COALESCE(pkey, '(no key yet)') AS k, COUNT(*) AS n FROM findings WHERE status = 'new' "
                   "GROUP BY k ORDER BY n DESC, k")
    return tuple((str(r["k"]), int(r["n"])) for r in rows)


def _series(db: _Db, stats: list[dict[str, Any]], clusters: tuple[ClusterRow, ...],
            started: float | None) -> tuple[dict[str, list[tuple[float, float]]], str]:
    """Timelines in campaign minutes. From the stats table when there is one; otherwise derived
    from per-test rows (tests, bug verdicts) and cluster first-seen times."""
    series: dict[str, list[tuple[float, float]]] = {}
    if stats:
        for name in ("tests", "bugs", "clusters", "invalid", "worker_restarts", "timeouts", "segfaults", "rss_mb",
                     "covered_lines", "tests_per_min"):
            pts = [(float(r.get("elapsed_s") or 0.0) / 60.0, float(r[name])) for r in stats
                   if r.get(name) is not None and not (name == "rss_mb" and float(r[name]) <= 0.0)]  # 0: no worker alive
            if pts:
                series[name] = pts
        return series, "stats"
    if "tests" not in db.tables:
        return series, "tests"
    tcols = db.cols("tests")
    if "elapsed_s" in tcols:
        rows = db.rows("SELECT elapsed_s AS t, symptom FROM tests WHERE elapsed_s IS NOT NULL ORDER BY elapsed_s")
        to_min = [(float(r["t"]) / 60.0, r["symptom"]) for r in rows]
    elif started is not None:
        rows = db.rows("SELECT created AS t, symptom FROM tests ORDER BY created")
        to_min = [(max(0.0, float(r["t"]) - started) / 60.0, r["symptom"]) for r in rows]
    else:
        to_min = []
    if to_min:
        series["tests"] = [(0.0, 0.0)] + [(t, float(i + 1)) for i, (t, _) in enumerate(to_min)]
        n = 0
        bugs = [(0.0, 0.0)]
        for t, s in to_min:
            if s in _BUG_SYMPTOMS:
                n += 1
                bugs.append((t, float(n)))
        series["bugs"] = bugs
    seen = sorted(c.first_seen_s for c in clusters if c.first_seen_s is not None)
    if seen:
        series["clusters"] = [(0.0, 0.0)] + [(t / 60.0, float(i + 1)) for i, t in enumerate(seen)]
    return series, "tests"


def _clusters_by_arm(db: _Db, clusters: tuple[ClusterRow, ...]) -> dict[str, tuple[int, int]]:
    """arm -> (clusters it found first, of those listed): what each arm was really worth."""
    if "findings" not in db.tables or "arm" not in db.cols("tests") or "signature_digest" not in db.cols("findings"):
        return {}
    listed = {c.cluster_id for c in clusters if c.listed}
    out: dict[str, list[int]] = {}
    rows = db.rows("SELECT f.signature_digest AS cid, t.arm AS arm FROM findings f JOIN tests t "
                   "ON t.case_id = f.case_id AND t.target = f.target WHERE f.signature_digest IS NOT NULL "
                   "AND f.finding_id = (SELECT MIN(g.finding_id) FROM findings g "
                   "WHERE g.signature_digest = f.signature_digest)")
    for r in rows:
        counts = out.setdefault(str(r["arm"] or ""), [0, 0])
        counts[0] += 1
        counts[1] += int(r["cid"] in listed)
    return {k: (v[0], v[1]) for k, v in out.items()}


def _scheduler(db: _Db, clusters: tuple[ClusterRow, ...] = ()) -> SchedulerView | None:
    data = db.meta_json(_SCHEDULER_KEYS)
    if not isinstance(data, dict):
        return None
    found = _clusters_by_arm(db, clusters)
    arms = []
    raw = data.get("arms") or {}
    for key, vals in (raw.items() if isinstance(raw, dict) else []):
        parts = (str(key).split("|", 2) + ["", "", ""])[:3]
        try:
            if isinstance(vals, dict):  # tolerate a dict form: {alpha, beta, pulls, rewards}
                alpha, beta = float(vals.get("alpha", 1.0)), float(vals.get("beta", 1.0))
                pulls, rewards = int(vals.get("pulls", 0)), int(vals.get("rewards", 0))
            else:  # [alpha0, beta0, alpha, beta, pulls, rewards] (agent/scheduler.py)
                a0, b0, a, b, pulls, rewards = vals
                alpha, beta, pulls, rewards = float(a0) + float(a), float(b0) + float(b), int(pulls), int(rewards)
        except (TypeError, ValueError):
            continue
        mean = alpha / (alpha + beta) if alpha + beta > 0 else 0.0
        n_found, n_listed = found.get(str(key), (0, 0))
        arms.append(ArmRow(arm=str(key), source=parts[0], category=parts[1], target=parts[2], alpha=alpha, beta=beta,
                           mean=mean, pulls=pulls, rewards=rewards, clusters=n_found, listed=n_listed))
    arms.sort(key=lambda a: (-a.mean, -a.pulls, a.arm))
    settings = {k: v for k, v in data.items() if k not in ("arms", "seen", "rng", "policy")}
    seen = data.get("seen")
    return SchedulerView(policy=str(data.get("policy") or "unknown"), settings=settings, arms=tuple(arms),
                         seen=len(seen) if isinstance(seen, list) else int(seen or 0))


def _compiler_reasons(db: _Db, limit: int = 10) -> CompilerReasons | None:
    """The most frequent graph-break and recompile reasons over the tests that recorded them."""
    cols = db.cols("tests")
    if "graph_breaks" not in cols or "recompiles" not in cols:
        return None
    try:
        from nnforge.triage.normalize import normalize_message
    except Exception:  # triage missing: group the reasons as written
        def normalize_message(text: str) -> str:
            return text
    counts: dict[str, dict[str, Any]] = {"graph_breaks": {}, "recompiles": {}}
    tests = with_gb = with_rc = 0
    for r in db.rows("SELECT target, graph_breaks, recompiles FROM tests "
                     "WHERE graph_breaks IS NOT NULL OR recompiles IS NOT NULL"):
        tests += 1
        for kind in ("graph_breaks", "recompiles"):
            try:
                items = json.loads(r[kind]) if r[kind] else []
            except ValueError:
                items = []
            reasons = {normalize_message(str(x))[:200] for x in items if x}
            if reasons:
                with_gb += kind == "graph_breaks"
                with_rc += kind == "recompiles"
            for reason in reasons:
                entry = counts[kind].setdefault(reason, {"n": 0, "targets": set()})
                entry["n"] += 1
                entry["targets"].add(str(r["target"]))

    def top(kind: str) -> tuple[ReasonRow, ...]:
        rows = sorted(counts[kind].items(), key=lambda kv: (-kv[1]["n"], kv[0]))[:limit]
        return tuple(ReasonRow(reason=k, tests=v["n"], targets=tuple(sorted(v["targets"]))) for k, v in rows)

    return CompilerReasons(tests=tests, with_graph_breaks=with_gb, with_recompiles=with_rc,
                           graph_breaks=top("graph_breaks"), recompiles=top("recompiles"))


def _empty_view(folder: Path) -> CampaignView:
    return CampaignView(folder=folder, status=None, config={}, started=None, elapsed_s=0.0, workers=1, targets=(),
                        tests=0, bugs=0, invalid=0, verdicts={}, by_category=(), by_target=(), by_source=(),
                        by_mutator=(), stage_seconds={}, findings={"total": 0, "new": 0, "triaged": 0, "failed": 0},
                        clusters=(), stats=(), scheduler=None, timeline_source="tests")


# -- small formatting helpers shared by the summary and the report ---------------------------------
def fmt_duration(seconds: float) -> str:
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h {m:02d}m {sec:02d}s" if h else (f"{m}m {sec:02d}s" if m else f"{sec}s")


def fmt_time(epoch: float | None) -> str:
    return "-" if epoch is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def scheduler_policy_text() -> str:
    """The scheduler's documented policy (agent/scheduler.py's docstring), or "" when unavailable."""
    try:
        from nnforge.agent import scheduler
    except Exception:
        return ""
    return (scheduler.__doc__ or "").strip()


def relpath(path: Path, start: Path) -> str:
    return os.path.relpath(path, start)

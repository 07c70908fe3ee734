"""Everything the campaign summary, the HTML report and the benchmark show, read from the store.

Why one view: the summary (Markdown), the report (HTML) and bench/campaign.py show the same
figures, so they are computed once here, as a `CampaignView`, and each page only formats it.
Each must render for any store: a finished campaign, one still running, an empty one, or a store
written by `nnforge triage` before campaigns existed (no `stats` table, no campaign columns on
`tests`). The queries, and the rule that what is missing reads as empty rather than raising,
are `agent/store.py`'s `StoreReader`: it opens its own connection and only SELECTs, so a view can
be read while a campaign is writing (WAL). This module holds no SQL.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnforge.agent.store import StoreReader, store_file
from nnforge.core.verdict import BUG_SYMPTOMS, Symptom

STAGES = ("generate", "mutate", "search", "oracle")  # tests.t_<stage> columns, in pipeline order
_CONFIG_KEYS = ("campaign_config", "campaign")
_SCHEDULER_KEYS = ("scheduler_state", "scheduler")


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
    inductor_kernels: str | None = None  # how the workers built Inductor's C++ kernels (oracle/kernel_unit.py)
    sandbox: str | None = None  # the isolation the workers ran under (oracle/sandbox.Isolation.summary)
    export_table: str | None = None  # what ONNX targets' generation skipped (agent/export_probe.py), if any
    export_gate: str | None = None  # what the export gate checked before tests turned away (agent/export_gate.py)
    triage_outlook: str | None = None  # the last word on triage's backlog (agent/campaign.py), when one grew
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
                "busy_s": _busy_seconds(last),
                "rss_first_mb": rss[0] if rss else None, "rss_last_mb": rss[-1] if rss else None,
                "rss_max_mb": max(rss) if rss else None}


def _busy_seconds(stats_row: dict[str, Any]) -> float | None:
    """Worker seconds held by calls (tests, triage, probes) at a stats row; None before it was kept."""
    value = ((stats_row.get("json") or {}).get("health") or {}).get("busy_s")
    return float(value) if isinstance(value, (int, float)) else None


# -- reading ------------------------------------------------------------------------------------
def load_view(store_or_path: Any, campaign_dir: Path | None = None) -> CampaignView:
    """Read everything the reports show. `store_or_path`: a Store, a campaign folder or the file."""
    path = store_file(store_or_path)
    folder = Path(campaign_dir) if campaign_dir is not None else path.parent
    if not path.is_file():
        return _empty_view(folder)
    with StoreReader(path) as db:
        return _read(db, folder)


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


def _read(db: StoreReader, folder: Path) -> CampaignView:
    config = db.meta_json(_CONFIG_KEYS) or {}
    if not isinstance(config, dict):
        config = {}
    started = _float(db.meta("campaign_started")) or _float(db.meta("created"))
    stats = db.stats_rows()
    tcols = db.columns("tests")
    verdicts = db.verdict_counts_by_target()
    tests = sum(n for by in verdicts.values() for n in by.values())
    invalid = sum(by.get(Symptom.INVALID.value, 0) for by in verdicts.values())
    bugs = sum(n for by in verdicts.values() for s, n in by.items() if s in BUG_SYMPTOMS)
    elapsed = _elapsed(db, stats, started, tests)
    targets = tuple(config.get("targets") or sorted(verdicts))
    workers = int(config.get("workers") or 1)
    clusters = _clusters(db, folder, started)
    series, source = _series(db, stats, clusters, started)
    programs = db.programs_total()
    return CampaignView(
        folder=folder, status=db.meta("campaign_status"), sandbox=db.meta("sandbox"), export_table=db.meta("export_table"),
        inductor_kernels=db.meta("inductor_kernels"),
        export_gate=db.meta("export_gate"), triage_outlook=db.meta("triage_outlook"), config=config, started=started, elapsed_s=elapsed,
        workers=workers, targets=targets, tests=tests, bugs=bugs, invalid=invalid, verdicts=verdicts,
        gated=db.invalid_at_rung_by_target("onnx_export"),  # tests that never reached their target
        by_category=_yield(db, "category"), by_target=_yield(db, "target"),
        by_source=_yield(db, "source" if "source" in tcols else "origin"), by_mutator=_yield(db, "mutator"),
        stage_seconds=db.stage_sums(STAGES), findings=_findings(db), clusters=clusters, stats=tuple(stats),
        scheduler=_scheduler(db, clusters), timeline_source=source, series=series, compiler=_compiler_reasons(db),
        waiting=tuple(db.waiting_by_key()), by_value_bin=tuple(r for r in _yield(db, "value_bin") if r.key != "(none)"),
        value_bin_kept=db.value_bin_kept(),
        by_calls_kind=tuple(r for r in _yield(db, "calls_kind") if r.key != "(none)"),
        programs=programs if programs is not None else 0)


def _elapsed(db: StoreReader, stats: list[dict[str, Any]], started: float | None, tests: int) -> float:
    """Campaign seconds: the longest the meta, the last stats row or a verdict says; for a store
    with none of them, from the start to the last test recorded."""
    latest = db.max_test_elapsed()
    elapsed = max([_float(db.meta("campaign_elapsed_s")) or 0.0]
                  + [float(r.get("elapsed_s") or 0.0) for r in stats[-1:]]
                  + ([latest] if latest is not None else []))
    if elapsed <= 0 and started is not None and tests:
        _, last = db.created_span()
        elapsed = max(0.0, float(last or started) - started)
    return elapsed


def _yield(db: StoreReader, column: str) -> tuple[YieldRow, ...]:
    return tuple(YieldRow(key=k, tests=n, bugs=bugs, invalid=invalid, clusters=clusters)
                 for k, n, bugs, invalid, clusters in db.yield_by(column))


def _findings(db: StoreReader) -> dict[str, int]:
    out = {"total": 0, "new": 0, "triaged": 0, "attached": 0, "failed": 0}
    for status, n in db.findings_by_status():
        out["total"] += n
        out[status] = out.get(status, 0) + n
    failed = db.failed_count()
    if failed is not None:
        out["failed"] = failed
    return out


def _clusters(db: StoreReader, folder: Path, started: float | None) -> tuple[ClusterRow, ...]:
    out = []
    for d in db.cluster_rows():
        cid = str(d["cluster_id"])
        try:
            sig = json.loads(d.get("signature_json") or "{}")
        except ValueError:
            sig = {}
        targets = db.cluster_targets(cid)
        if not targets and sig.get("target"):
            targets = (str(sig["target"]),)
        first = _float(d.get("first_seen"))
        report = folder / "findings" / cid / "report.md"
        out.append(ClusterRow(cluster_id=cid, title=str(d.get("llm_title") or d.get("title") or ""), count=int(d.get("count") or 0),
                              first_seen_s=None if first is None or started is None else max(0.0, first - started),
                              targets=targets, symptom=str(sig.get("symptom") or ""), rung=sig.get("rung"),
                              report=f"findings/{cid}/report.md" if report.is_file() else None,
                              repro_status=str(d.get("repro_status") or "unchecked"),
                              repro_detail=str(d.get("repro_detail") or ""), attached=db.attached_count(cid)))
    return tuple(out)


def _series(db: StoreReader, stats: list[dict[str, Any]], clusters: tuple[ClusterRow, ...],
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
    if not db.has_table("tests"):
        return series, "tests"
    if "elapsed_s" in db.columns("tests"):
        to_min = [(t / 60.0, s) for t, s in db.symptoms_by_elapsed()]
    elif started is not None:
        to_min = [(max(0.0, t - started) / 60.0, s) for t, s in db.symptoms_by_created()]
    else:
        to_min = []
    if to_min:
        series["tests"] = [(0.0, 0.0)] + [(t, float(i + 1)) for i, (t, _) in enumerate(to_min)]
        n = 0
        bugs = [(0.0, 0.0)]
        for t, s in to_min:
            if s in BUG_SYMPTOMS:
                n += 1
                bugs.append((t, float(n)))
        series["bugs"] = bugs
    seen = sorted(c.first_seen_s for c in clusters if c.first_seen_s is not None)
    if seen:
        series["clusters"] = [(0.0, 0.0)] + [(t / 60.0, float(i + 1)) for i, t in enumerate(seen)]
    return series, "tests"


def _clusters_by_arm(db: StoreReader, clusters: tuple[ClusterRow, ...]) -> dict[str, tuple[int, int]]:
    """arm -> (clusters it found first, of those listed): what each arm was really worth."""
    listed = {c.cluster_id for c in clusters if c.listed}
    out: dict[str, list[int]] = {}
    for cid, arm in db.first_finding_arms():
        counts = out.setdefault(str(arm or ""), [0, 0])
        counts[0] += 1
        counts[1] += int(cid in listed)
    return {k: (v[0], v[1]) for k, v in out.items()}


def _scheduler(db: StoreReader, clusters: tuple[ClusterRow, ...] = ()) -> SchedulerView | None:
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


def _compiler_reasons(db: StoreReader, limit: int = 10) -> CompilerReasons | None:
    """The most frequent graph-break and recompile reasons over the tests that recorded them."""
    records = db.compiler_records()
    if records is None:
        return None
    try:
        from nnforge.triage.normalize import normalize_message
    except Exception:  # triage missing: group the reasons as written
        def normalize_message(text: str) -> str:
            return text
    counts: dict[str, dict[str, Any]] = {"graph_breaks": {}, "recompiles": {}}
    tests = with_gb = with_rc = 0
    for target, graph_breaks, recompiles in records:
        tests += 1
        for kind, raw in (("graph_breaks", graph_breaks), ("recompiles", recompiles)):
            try:
                items = json.loads(raw) if raw else []
            except ValueError:
                items = []
            reasons = {normalize_message(str(x))[:200] for x in items if x}
            if reasons:
                with_gb += kind == "graph_breaks"
                with_rc += kind == "recompiles"
            for reason in reasons:
                entry = counts[kind].setdefault(reason, {"n": 0, "targets": set()})
                entry["n"] += 1
                entry["targets"].add(str(target))

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

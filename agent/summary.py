"""`DIR/summary.md`: the campaign in one Markdown page (what ran, what it found, how healthy it was).

Written at the end of a campaign (and whenever asked) from the store alone, so it can be rebuilt
for an interrupted or older campaign. The HTML report (`report_html.py`) shows the same figures
with plots; both read them through `report_data.load_view`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nnforge.agent.report_data import CampaignView, YieldRow, fmt_duration, fmt_time, write_view_file
from nnforge.core.verdict import Symptom

SUMMARY_FILE = "summary.md"
MAX_ARMS = 30


def write_summary(campaign_dir: Path, store: Any) -> Path:
    """Write DIR/summary.md from `store` (a Store, or the campaign folder) and return its path."""
    return write_view_file(campaign_dir, store, SUMMARY_FILE, render_summary)


def _md(s: Any) -> str:
    """A table cell: no pipes or newlines."""
    return str(s).replace("|", "\\|").replace("\n", " ").strip()


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(_md(c) for c in r) + " |" for r in rows]
    return out


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _yield_table(rows: tuple[YieldRow, ...], what: str) -> list[str]:
    if not rows:
        return [f"_no {what} recorded_"]
    return _table([what, "tests", "bug verdicts", "bug rate", "clusters", "invalid"],
                  [[r.key, r.tests, r.bugs, _pct(r.bug_rate), r.clusters, _pct(r.invalid_rate)] for r in rows])


def _kept(counts: tuple[int, int] | None) -> str:
    if not counts or not counts[1]:
        return "-"
    return f"{counts[0]} ({_pct(counts[0] / counts[1])})"


def _compiler_section(view: CampaignView) -> list[str]:
    """The most frequent reasons Dynamo broke a graph or recompiled, over the torch.compile tests."""
    c = view.compiler
    if c is None or c.tests == 0:
        return ["_no graph breaks or recompiles recorded (no torch.compile tests yet)_"]
    out = [f"{c.tests} torch.compile tests: {c.with_graph_breaks} with a graph break, "
           f"{c.with_recompiles} with a recompile on a later call.", ""]
    for title, rows in (("graph-break reason", c.graph_breaks), ("recompile reason (guard failure)", c.recompiles)):
        if rows:
            out += _table([f"top {title}", "tests", "targets"],
                          [[f"`` {r.reason} ``", r.tests, ", ".join(r.targets)] for r in rows]) + [""]
    return out[:-1] if out[-1] == "" else out


def _cluster_table(clusters: Any) -> list[str]:
    return _table(["#", "cluster", "title", "findings (attached)", "targets", "first seen", "report"],
                  [[i + 1, f"`{c.cluster_id[:12]}`", c.title, f"{c.count} ({c.attached})", ", ".join(c.targets) or "-",
                    "-" if c.first_seen_s is None else fmt_duration(c.first_seen_s),
                    f"[report.md]({c.report})" if c.report else "not written yet"]
                   for i, c in enumerate(clusters)])


def render_summary(view: CampaignView) -> str:
    lines = [f"# NNForge campaign: {view.folder.name}", ""]
    for section in (_head, _cluster_sections, _verdict_section):
        lines += section(view)
    lines += ["", "## Graph breaks and recompiles (torch.compile)", ""] + _compiler_section(view)
    for section in (_yield_sections, _stage_section, _scheduler_section, _health_section):
        lines += section(view)
    lines += ["", "Plots: [report.html](report.html).", ""]
    return "\n".join(lines)


def _head(view: CampaignView) -> list[str]:
    """The campaign in one list: what ran, how fast, what it found."""
    head = [
        ("status", view.status or "-"),
        ("started", fmt_time(view.started)),
        ("duration", fmt_duration(view.elapsed_s)),
        ("targets", ", ".join(view.targets) or "-"),
        ("workers", view.workers),
        ("sandbox", view.sandbox or "not recorded"),
    ] + ([("inductor kernels", view.inductor_kernels)] if view.inductor_kernels else []) + [
        ("tests", view.tests),
        ("tests per minute", f"{view.tests_per_min:.1f} ({view.tests_per_min_per_worker:.1f} per worker)"),
    ] + ([("programs (tests pack several generator programs)",
           f"{view.programs} ({view.programs / (view.elapsed_s / 60.0):.1f} per minute)" if view.elapsed_s >= 1.0
           else str(view.programs))] if view.programs > view.tests else []) + [
        ("bug verdicts", view.bugs),
        ("unique bugs (clusters whose repro.py reproduced)", len(view.bug_clusters)),
        ("invalid", f"{view.invalid} ({_pct(view.invalid / view.tests) if view.tests else '0.0%'})"),
        ("findings", f"{view.findings['total']} ({view.findings.get('triaged', 0)} reduced, "
                     f"{view.findings.get('attached', 0)} attached unreduced (by key, or a known guilty operator wrong alone in them), "
                     f"{view.findings.get('new', 0)} waiting, of which {view.findings.get('failed', 0)} failed triage)"),
    ]
    if view.triage_outlook:
        head.append(("triage backlog", view.triage_outlook))
    if view.export_table:
        head.append(("ONNX generation", view.export_table))
    if view.export_gate:
        head.append(("ONNX export gate", view.export_gate))
    if view.covered_lines is not None:
        head.append(("compiler lines covered", view.covered_lines))
    if view.llm is not None:
        s = view.llm
        head.append(("LLM", f"{s.get('calls', 0)} calls ({s.get('cache_hits', 0)} from the cache), "
                            f"{s.get('tokens', 0)} tokens, {s.get('failures', 0)} failed, {s.get('mutants', 0)} "
                            f"mutants used, {s.get('fallbacks', 0)} tests fell back to offline mutators"
                            + (f"; last error: {s['last_error']}" if s.get("last_error") else "")))
    return [f"- **{k}**: {v}" for k, v in head]


def _cluster_sections(view: CampaignView) -> list[str]:
    """The listed clusters, those not listed (and why), and the findings still waiting."""
    lines: list[str] = []
    lines += ["", "## Unique bugs (clusters)", "",
              "Each listed cluster's `repro.py` exited 1 in a fresh process (three times for wrong results).", ""]
    bugs = view.bug_clusters
    if bugs:
        lines += _cluster_table(bugs)
    else:
        lines.append("_none found_")
    others = [c for c in view.clusters if not c.listed]
    if others:
        lines += ["", "## Not listed: repro did not reproduce, or not checked yet", ""]
        lines += _table(["cluster", "title", "findings", "repro", "why"],
                        [[f"`{c.cluster_id[:12]}`", c.title, c.count, c.repro_status, c.repro_detail or "-"]
                         for c in others])
    if view.waiting:
        lines += ["", f"## Waiting for triage ({sum(n for _, n in view.waiting)} findings)", "",
                  "`nnforge triage DIR` reduces them (the first of each key) and attaches the rest.", ""]
        lines += _table(["provisional key", "findings"], [[f"`{k[:160]}`", n] for k, n in view.waiting[:20]])
        if len(view.waiting) > 20:
            lines.append(f"\n… and {len(view.waiting) - 20} more keys")
    return lines


def _verdict_section(view: CampaignView) -> list[str]:
    """Verdicts per target, and how many ONNX tests the export gate stopped."""
    lines: list[str] = []
    lines += ["", "## Verdicts per target", ""]
    if view.verdicts:
        symptoms = [s.value for s in Symptom if any(s.value in v for v in view.verdicts.values())]
        lines += _table(["target", "tests"] + symptoms,
                        [[t, sum(c.values())] + [c.get(s, 0) for s in symptoms] for t, c in sorted(view.verdicts.items())])
        for t, n in sorted(view.gated.items()):
            total = sum(view.verdicts.get(t, {}).values())
            lines.append(f"\n`{t}`: {total - n} of {total} tests reached it ({_pct((total - n) / total) if total else '-'}); "
                         f"{n} stopped at the ONNX export (not exportable, or the exported graph already wrong in "
                         "onnx.reference): counted invalid, never findings against the runtime.")
    else:
        lines.append("_no tests recorded_")
    return lines


def _yield_sections(view: CampaignView) -> list[str]:
    """Bug and invalid rates per category, target, kind of call, value bin, source, mutator."""
    lines: list[str] = []
    lines += ["", "## Yield per category", ""] + _yield_table(view.by_category, "category")
    lines += ["", "## Yield per target", ""] + _yield_table(view.by_target, "target")
    if view.by_calls_kind:
        lines += ["", "## Yield per kind of call", ""] + _yield_table(view.by_calls_kind, "calls")
    if view.by_value_bin:
        lines += ["", "## Yield per value bin", "",
                  "The values each test ran on were drawn from a bin the scheduler picked (oracle/value_bins.py); "
                  "'kept' counts the tests whose values still had the bin's property after value search.", ""]
        lines += _table(["value bin", "tests", "kept", "bug verdicts", "bug rate", "clusters", "invalid"],
                        [[r.key, r.tests, _kept(view.value_bin_kept.get(r.key)), r.bugs, _pct(r.bug_rate), r.clusters,
                          _pct(r.invalid_rate)] for r in view.by_value_bin])
    if view.by_source:
        lines += ["", "## Yield per seed source", ""] + _yield_table(view.by_source, "source")
    if any(r.key != "(none)" for r in view.by_mutator):
        lines += ["", "## Yield per mutator", ""] + _yield_table(view.by_mutator, "mutator")
    return lines


def _stage_section(view: CampaignView) -> list[str]:
    """Where the campaign's seconds went, stage by stage."""
    lines: list[str] = []
    lines += ["", "## Time per stage", ""]
    total = sum(view.stage_seconds.values())
    if total > 0:
        lines += _table(["stage", "seconds", "share", "per test (ms)"],
                        [[s, f"{v:.1f}", _pct(v / total), f"{1000 * v / max(1, view.tests):.0f}"]
                         for s, v in view.stage_seconds.items()])
    else:
        lines.append("_no stage timings recorded_")
    return lines


def _scheduler_section(view: CampaignView) -> list[str]:
    """The scheduler's policy and its busiest arms."""
    lines: list[str] = []
    lines += ["", "## Scheduler", ""]
    sched = view.scheduler
    if sched is None:
        lines.append("_no scheduler state recorded_")
    else:
        settings = ", ".join(f"{k} = {v}" for k, v in sorted(sched.settings.items()) if not isinstance(v, (dict, list)))
        lines.append(f"Policy **{sched.policy}** ({settings}); {sched.seen} distinct behaviours seen. "
                     "The policy is documented in `agent/scheduler.py`.")
        lines.append("")
        arms = sorted(sched.arms, key=lambda a: (-a.pulls, -a.mean, a.arm))[:MAX_ARMS]
        if arms:
            lines.append("A test earns its arm a reward only for a behaviour not seen before; a finding whose "
                         "root cause is already known earns nothing. Clusters are counted for the arm whose test "
                         "found them first.")
            lines.append("")
            lines += _table(["arm (source / category / target)", "tests", "rewards", "clusters found", "listed",
                             "mean reward"],
                            [[f"{a.source} / {a.category} / {a.target}", a.pulls, a.rewards, a.clusters, a.listed,
                              f"{a.mean:.3f}"] for a in arms])
            if len(sched.arms) > MAX_ARMS:
                lines.append(f"\n({len(sched.arms) - MAX_ARMS} more arms, fewer pulls; all in report.html)")
    return lines


def _health_section(view: CampaignView) -> list[str]:
    """Worker restarts, timeouts, segfaults and memory."""
    lines: list[str] = []
    health = view.health()
    lines += ["", "## Worker health", ""]
    rss = ("-" if health["rss_max_mb"] is None else
           f"first {health['rss_first_mb']:.0f} MB, last {health['rss_last_mb']:.0f} MB, max {health['rss_max_mb']:.0f} MB")
    lines += [f"- **worker restarts**: {health['worker_restarts']}",
              f"- **timeouts**: {health['timeouts']}",
              f"- **segfaults**: {health['segfaults']}",
              f"- **worker RSS**: {rss}"]
    return lines

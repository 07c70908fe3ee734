"""`DIR/report.html`: the campaign as one static page with plots, readable straight from disk.

No server, no JavaScript, no external CSS, fonts or CDN: the styles are inline and every plot is
an inline SVG drawn by `svg_plots`, so the file can be mailed, attached to an issue or opened
from a cluster node with no network. Figures come from `report_data.load_view`, the same reader
the Markdown summary uses.
"""

from __future__ import annotations

import functools
import json
from html import escape
from pathlib import Path
from typing import Any

from nnforge.agent.report_data import (CampaignView, YieldRow, fmt_duration, fmt_time,
                                       scheduler_policy_text, write_view_file)
from nnforge.agent.svg_plots import PALETTE, Series, bar_chart
from nnforge.agent.svg_plots import line_chart as _line_chart
from nnforge.core.verdict import Symptom

REPORT_FILE = "report.html"

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0; color: #222;
       background: #f6f7f9; }
main { max-width: 1180px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 8px 0 4px; }
h3 { font-size: 14px; margin: 14px 0 4px; color: #444; }
h2 { font-size: 17px; margin: 28px 0 10px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.sub { color: #666; font-size: 13px; }
.tiles { display: flex; flex-wrap: wrap; gap: 10px; margin: 14px 0; }
.tile { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 8px 14px; min-width: 120px; }
.tile .v { font-size: 20px; font-weight: 600; }
.tile .k { font-size: 12px; color: #666; }
.tile.bad .v { color: #c62828; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 14px; }
.charts svg { display: block; max-width: 100%; height: auto; }
table { border-collapse: collapse; background: #fff; font-size: 13px; margin: 6px 0 10px; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f0f2f5; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 12px; }
details { margin: 6px 0; }
pre { background: #fff; border: 1px solid #ddd; padding: 8px; overflow-x: auto; font-size: 12px; white-space: pre-wrap; }
.muted { color: #888; }
"""


def write_report(campaign_dir: Path, store: Any) -> Path:
    """Write DIR/report.html from `store` (a Store, or the campaign folder) and return its path."""
    return write_view_file(campaign_dir, store, REPORT_FILE, render_report)


# -- pieces -----------------------------------------------------------------------------------------
def _table(header: list[str], rows: list[list[Any]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            raw = c if isinstance(c, _Raw) else escape(str(c))
            cells.append(f'<td class="n">{raw}</td>' if i in numeric else f"<td>{raw}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class _Raw(str):
    """Cell content that is already HTML."""


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _tile(key: str, value: Any, bad: bool = False) -> str:
    return f'<div class="tile{" bad" if bad else ""}"><div class="v">{escape(str(value))}</div><div class="k">{escape(key)}</div></div>'


def _yield_bars(rows: tuple[YieldRow, ...], title: str) -> str:
    bars = [(r.key, r.bug_rate, f"{r.bugs}/{r.tests}, {r.clusters} cluster{'s' if r.clusters != 1 else ''}")
            for r in rows]
    return bar_chart(bars, title=title, value_label="share of tests with a bug verdict (bug verdicts/tests, clusters)", percent=True,
                     color=PALETTE[1])


def _yield_table(rows: tuple[YieldRow, ...], what: str) -> str:
    if not rows:
        return f'<p class="muted">no {escape(what)} recorded</p>'
    return _table([what, "tests", "bug verdicts", "bug rate", "clusters", "invalid"],
                  [[r.key, r.tests, r.bugs, _pct(r.bug_rate), r.clusters, _pct(r.invalid_rate)] for r in rows],
                  numeric={1, 2, 3, 4, 5})


def _time_unit(view: CampaignView) -> tuple[float, str]:
    """Minutes on the x axis, or seconds for a run shorter than two minutes."""
    last = max((pts[-1][0] for pts in view.series.values() if pts), default=0.0)
    return (60.0, "seconds") if last < 2.0 else (1.0, "minutes")


def _series(view: CampaignView, name: str, label: str, color: str | None = None, step: bool = False) -> Series:
    scale, _ = _time_unit(view)
    return Series(label, tuple((x * scale, y) for x, y in view.series.get(name, ())), color=color, step=step)


def charts(view: CampaignView) -> list[str]:
    """Every plot of the report, as SVG text, in page order."""
    line_chart = functools.partial(_line_chart, x_label=_time_unit(view)[1])
    out = [
        line_chart([_series(view, "tests", "tests", PALETTE[0]), _series(view, "invalid", "invalid", "#999999")],
                   title="Tests over time", y_label="tests"),
        line_chart([_series(view, "clusters", "unique bugs (clusters)", PALETTE[1], step=True)],
                   title="Unique bugs over time", y_label="clusters"),
        line_chart([_series(view, "bugs", "bug verdicts", PALETTE[3], step=True)],
                   title="Bug verdicts over time", y_label="verdicts"),
        line_chart([_series(view, "tests_per_min", "tests / minute", PALETTE[2])],
                   title="Throughput", y_label="tests per minute"),
        _yield_bars(view.by_category, "Yield per category"),
        _yield_bars(view.by_target, "Yield per target"),
        line_chart([_series(view, "worker_restarts", "restarts", PALETTE[4], step=True),
                    _series(view, "timeouts", "timeouts", PALETTE[3], step=True),
                    _series(view, "segfaults", "segfaults", PALETTE[1], step=True)],
                   title="Worker restarts over time", y_label="count"),
        line_chart([_series(view, "rss_mb", "max worker RSS", PALETTE[5])], title="Worker memory over time",
                   y_label="MB"),
    ]
    if view.series.get("covered_lines"):
        out.append(line_chart([_series(view, "covered_lines", "lines covered", PALETTE[2])],
                              title="Compiler lines covered (torch/_dynamo, _inductor, _functorch)", y_label="lines"))
    total = sum(view.stage_seconds.values())
    if total > 0:
        out.append(bar_chart([(s, v / total, f"{v:.0f} s") for s, v in view.stage_seconds.items()],
                             title="Share of time per stage", percent=True, max_value=1.0, color=PALETTE[0]))
    return out


def render_report(view: CampaignView) -> str:
    parts = _page_top(view)
    parts.append("<h2>Plots</h2>")
    parts.append('<div class="charts">' + "".join(f"<div>{svg}</div>" for svg in charts(view)) + "</div>")
    parts += _cluster_sections(view) + _verdict_section(view)
    parts.append(_compiler_section(view))
    parts += _yield_and_stage_sections(view)
    parts.append(_scheduler_section(view))
    parts += _health_section(view)
    if view.config:
        parts.append("<h2>Configuration</h2><details><summary>campaign settings</summary><pre>"
                     + escape(json.dumps(view.config, indent=2, sort_keys=True, default=str)) + "</pre></details>")
    parts.append('<p class="sub">Written by NNForge from the campaign store; <a href="summary.md">summary.md</a> has the '
                 "same figures as text.</p>")
    parts.append("</main></body></html>")
    return "\n".join(parts)


def _page_top(view: CampaignView) -> list[str]:
    """The head of the page, its title line and the tiles of headline figures."""
    health = view.health()
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8"/>',
             '<meta name="viewport" content="width=device-width, initial-scale=1"/>',
             f"<title>NNForge campaign {escape(view.folder.name)}</title><style>{_CSS}</style></head><body><main>"]
    parts.append(f"<h1>NNForge campaign: {escape(view.folder.name)}</h1>")
    parts.append(f'<div class="sub">status {escape(view.status or "-")} · started {escape(fmt_time(view.started))} · '
                 f'targets {escape(", ".join(view.targets) or "-")} · {view.workers} worker(s) · '
                 f'timeline from {escape(view.timeline_source)}</div>')

    tiles = [_tile("duration", fmt_duration(view.elapsed_s)), _tile("tests", view.tests),
             _tile("tests / min", f"{view.tests_per_min:.1f}"),
             _tile("tests / min / worker", f"{view.tests_per_min_per_worker:.1f}"),
             _tile("bug verdicts", view.bugs), _tile("unique bugs", len(view.bug_clusters), bad=bool(view.bug_clusters)),
             _tile("invalid", _pct(view.invalid / view.tests) if view.tests else "0.0%"),
             _tile("worker restarts", health["worker_restarts"]),
             _tile("max worker RSS", "-" if health["rss_max_mb"] is None else f"{health['rss_max_mb']:.0f} MB")]
    if view.covered_lines is not None:
        tiles.append(_tile("lines covered", view.covered_lines))
    parts.append('<div class="tiles">' + "".join(tiles) + "</div>")
    return parts


def _cluster_sections(view: CampaignView) -> list[str]:
    """The listed clusters, those not listed (and why), and the findings count."""
    parts: list[str] = []
    parts.append("<h2>Unique bugs (clusters)</h2>")
    if view.bug_clusters:
        rows = []
        for i, c in enumerate(view.bug_clusters):
            link = _Raw(f'<a href="{escape(c.report)}">report.md</a>') if c.report else "not written yet"
            rows.append([i + 1, _Raw(f"<code>{escape(c.cluster_id[:12])}</code>"), c.title, c.count,
                         ", ".join(c.targets) or "-", c.symptom or "-", c.rung or "-",
                         "-" if c.first_seen_s is None else fmt_duration(c.first_seen_s), link])
        parts.append(_table(["#", "cluster", "title", "findings", "targets", "symptom", "rung", "first seen", "report"],
                            rows, numeric={0, 3}))
    else:
        parts.append('<p class="muted">none found</p>')
    others = [c for c in view.clusters if not c.listed]
    if others:
        parts.append("<h3>Not listed: repro did not reproduce, or not checked yet</h3>")
        parts.append(_table(["cluster", "title", "findings", "repro", "why"],
                            [[_Raw(f"<code>{escape(c.cluster_id[:12])}</code>"), c.title, c.count, c.repro_status,
                              c.repro_detail or "-"] for c in others], numeric={2}))
    f = view.findings
    parts.append(f'<p class="sub">findings: {f["total"]} ({f.get("triaged", 0)} reduced, {f.get("attached", 0)} '
                 f'attached unreduced, {f.get("new", 0)} waiting, of which {f.get("failed", 0)} failed triage)</p>')
    return parts


def _verdict_section(view: CampaignView) -> list[str]:
    """Verdicts per target."""
    parts: list[str] = []
    parts.append("<h2>Verdicts per target</h2>")
    if view.verdicts:
        symptoms = [s.value for s in Symptom if any(s.value in v for v in view.verdicts.values())]
        parts.append(_table(["target", "tests"] + symptoms,
                            [[t, sum(c.values())] + [c.get(s, 0) for s in symptoms]
                             for t, c in sorted(view.verdicts.items())], numeric=set(range(1, len(symptoms) + 2))))
    else:
        parts.append('<p class="muted">no tests recorded</p>')
    return parts


def _yield_and_stage_sections(view: CampaignView) -> list[str]:
    """Yield per category, target, source and mutator; time per stage."""
    parts: list[str] = []
    parts.append("<h2>Yield</h2>")
    for rows, what in ((view.by_category, "category"), (view.by_target, "target"), (view.by_source, "seed source"),
                       (view.by_mutator, "mutator")):
        if rows or what in ("category", "target"):
            parts.append(f"<h3>per {escape(what)}</h3>" + _yield_table(rows, what))

    parts.append("<h2>Time per stage</h2>")
    total = sum(view.stage_seconds.values())
    if total > 0:
        parts.append(_table(["stage", "seconds", "share", "per test (ms)"],
                            [[s, f"{v:.1f}", _pct(v / total), f"{1000 * v / max(1, view.tests):.0f}"]
                             for s, v in view.stage_seconds.items()], numeric={1, 2, 3}))
    else:
        parts.append('<p class="muted">no stage timings recorded</p>')
    return parts


def _health_section(view: CampaignView) -> list[str]:
    """Worker restarts, timeouts, segfaults and memory."""
    health = view.health()
    parts: list[str] = []
    parts.append("<h2>Worker health</h2>")
    parts.append(_table(["restarts", "timeouts", "segfaults", "RSS first (MB)", "RSS last (MB)", "RSS max (MB)"],
                        [[health["worker_restarts"], health["timeouts"], health["segfaults"]]
                         + ["-" if health[k] is None else f"{health[k]:.0f}"
                            for k in ("rss_first_mb", "rss_last_mb", "rss_max_mb")]],
                        numeric={0, 1, 2, 3, 4, 5}))
    return parts


def _compiler_section(view: CampaignView) -> str:
    """The most frequent graph-break and recompile reasons Dynamo recorded over torch.compile tests."""
    out = ["<h2>Graph breaks and recompiles (torch.compile)</h2>"]
    c = view.compiler
    if c is None or c.tests == 0:
        out.append('<p class="muted">no graph breaks or recompiles recorded (no torch.compile tests yet)</p>')
        return "".join(out)
    out.append(f"<p>{c.tests} torch.compile tests: {c.with_graph_breaks} with a graph break, {c.with_recompiles} "
               "with a recompile on a later call. Reasons are normalised (numbers and names as placeholders).</p>")
    for title, rows in (("graph-break reason", c.graph_breaks), ("recompile reason (guard failure)", c.recompiles)):
        if rows:
            out.append(_table([f"top {title}", "tests", "targets"],
                              [[_Raw(f"<code>{escape(r.reason)}</code>"), r.tests, ", ".join(r.targets)] for r in rows],
                              numeric={1}))
    return "".join(out)


def _scheduler_section(view: CampaignView) -> str:
    out = ["<h2>Scheduler</h2>"]
    sched = view.scheduler
    if sched is None:
        out.append('<p class="muted">no scheduler state recorded</p>')
        return "".join(out)
    settings = ", ".join(f"{k} = {v}" for k, v in sorted(sched.settings.items()) if not isinstance(v, (dict, list)))
    out.append(f"<p>Policy <b>{escape(sched.policy)}</b> ({escape(settings)}); {sched.seen} distinct behaviours seen. "
               "Arms are sorted by posterior mean reward (alpha / (alpha + beta)).</p>")
    doc = scheduler_policy_text()
    if doc:
        out.append(f"<details><summary>how the scheduler chooses (agent/scheduler.py)</summary><pre>{escape(doc)}</pre></details>")
    prior = sched.settings.get("prior")
    if isinstance(prior, dict) and prior:
        out.append("<details><summary>category priors</summary>"
                   + _table(["category", "prior share"], [[k, f"{float(v):.3f}"] for k, v in sorted(prior.items())],
                            numeric={1}) + "</details>")
    if sched.arms:
        pulled = [a for a in sched.arms if a.pulls > 0]
        rest = [a for a in sched.arms if a.pulls == 0]
        rows = [[a.source, a.category, a.target, a.pulls, a.rewards, a.clusters, a.listed, f"{a.alpha:.2f}",
                 f"{a.beta:.2f}", f"{a.mean:.3f}"] for a in pulled]
        out.append(_table(["source", "category", "target", "tests", "rewards", "clusters found", "listed", "alpha",
                           "beta", "mean reward"], rows,
                          numeric={3, 4, 5, 6, 7, 8, 9}) if rows else '<p class="muted">no arm pulled yet</p>')
        if rest:
            out.append(f"<details><summary>{len(rest)} arms not pulled yet</summary>"
                       + _table(["source", "category", "target", "alpha", "beta", "mean reward"],
                                [[a.source, a.category, a.target, f"{a.alpha:.2f}", f"{a.beta:.2f}", f"{a.mean:.3f}"]
                                 for a in rest], numeric={3, 4, 5}) + "</details>")
    return "".join(out)

"""The campaign's live status: one Rich panel on a terminal, plain log lines everywhere else.

The panel answers what a person watching an overnight run asks (AFL++'s screen is the model):
how long it has run and how much budget is left, how fast it goes, what the targets said, how
many bugs and clusters, the latest finding, when something new was last seen, and whether the
workers are healthy (restarts, timeouts, segfaults, memory). Off a terminal (CI, nohup, a pipe)
the same facts go out as one plain line every `every_s` seconds, plus one line per event.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text


@dataclass
class StatusSnapshot:
    elapsed_s: float = 0.0
    budget_s: float = 0.0
    tests: int = 0
    tests_per_min: float = 0.0
    in_flight: int = 0
    verdicts: dict[str, dict[str, int]] = field(default_factory=dict)  # target -> symptom -> count
    findings: int = 0
    clusters: int = 0
    latest_finding: dict[str, Any] | None = None
    last_new_s: float | None = None  # seconds since the scheduler was last rewarded
    health: dict[str, Any] = field(default_factory=dict)
    top_arms: list[dict[str, Any]] = field(default_factory=list)
    triage: str = ""
    llm: str = ""  # LLM calls, tokens, failures and fallbacks, when LLM mutators are on
    note: str = ""


def fmt_duration(s: float) -> str:
    s = int(max(0, s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def plain_line(s: StatusSnapshot) -> str:
    per_target = "; ".join(f"{t}: " + ",".join(f"{k}={v}" for k, v in sorted(c.items()))
                           for t, c in sorted(s.verdicts.items()))
    h = s.health
    latest = ""
    if s.latest_finding:
        f = s.latest_finding
        latest = f" | latest: {f.get('symptom')} on {f.get('target')} ({f.get('rung') or '-'}) {f.get('case_id')}"
    return (f"[{fmt_duration(s.elapsed_s)}/{fmt_duration(s.budget_s)}] tests {s.tests} ({s.tests_per_min:.1f}/min, "
            f"{s.in_flight} in flight) | findings {s.findings}, clusters {s.clusters} | {per_target or 'no verdicts yet'}"
            f" | workers {h.get('alive', 0)}/{h.get('size', 0)} restarts {h.get('restarts', 0)} timeouts "
            f"{h.get('timeouts', 0)} segfaults {h.get('segfaults', 0)} rss {h.get('rss_mb', 0):.0f} MB"
            f"{' | llm ' + s.llm if s.llm else ''}{latest}")


def render(s: StatusSnapshot) -> Panel:
    top = Table.grid(padding=(0, 2))
    top.add_column(style="bold")
    top.add_column()
    frac = s.elapsed_s / s.budget_s if s.budget_s else 0.0
    top.add_row("elapsed", f"{fmt_duration(s.elapsed_s)} of {fmt_duration(s.budget_s)} ({100 * min(frac, 1):.0f}%)")
    top.add_row("tests", f"{s.tests}  ({s.tests_per_min:.1f}/min, {s.in_flight} in flight)")
    top.add_row("findings", f"{s.findings} bug verdicts, {s.clusters} clusters")
    top.add_row("last new", "never" if s.last_new_s is None else f"{fmt_duration(s.last_new_s)} ago")
    h = s.health
    unhealthy = h.get("restarts", 0) or h.get("timeouts", 0) or h.get("segfaults", 0) or h.get("ooms", 0)
    top.add_row("workers", Text(f"{h.get('alive', 0)}/{h.get('size', 0)} alive, {h.get('restarts', 0)} restarts, "
                                f"{h.get('timeouts', 0)} timeouts, {h.get('segfaults', 0)} segfaults, "
                                f"{h.get('ooms', 0)} ooms, max rss {h.get('rss_mb', 0):.0f} MB",
                                style="yellow" if unhealthy else ""))
    if s.latest_finding:
        f = s.latest_finding
        top.add_row("latest", Text(f"{f.get('symptom')} on {f.get('target')} (rung {f.get('rung') or '-'}, "
                                   f"{f.get('category') or 'seed'}) case {f.get('case_id')}", style="red"))
    if s.triage:
        top.add_row("triage", s.triage)
    if s.llm:
        top.add_row("llm", s.llm)
    if s.note:
        top.add_row("", s.note)
    symptoms = sorted({k for c in s.verdicts.values() for k in c})
    title = "verdicts per target"
    verdicts = Table(title=title, expand=False, min_width=len(title) + 4)  # the title on one line, however few columns
    verdicts.add_column("target")
    for k in symptoms:
        verdicts.add_column(k, justify="right", style="green" if k == "pass" else ("yellow" if k == "invalid" else "red"))
    for t, c in sorted(s.verdicts.items()):
        verdicts.add_row(t, *(str(c.get(k, 0)) for k in symptoms))
    arms = Table(title="scheduler (Thompson sampling): best arms", expand=False)
    for col in ("arm", "pulls", "new", "mean"):
        arms.add_column(col, justify="left" if col == "arm" else "right")
    for a in s.top_arms[:6]:
        arms.add_row(a["arm"], str(a["pulls"]), str(a["rewards"]), f"{a['mean']:.2f}")
    return Panel(Group(top, verdicts, arms), title="NNForge campaign", border_style="blue")


class StatusDisplay:
    """`update(snapshot)` as often as you like; `event(text)` for one-off lines (findings, errors)."""

    def __init__(self, console: Console | None = None, *, live: bool | None = None, every_s: float = 10.0):
        self.console = console or Console()
        self.live_mode = self.console.is_terminal if live is None else live
        self.every_s = every_s
        self._live: Live | None = None
        self._last_line = 0.0

    def start(self) -> None:
        if self.live_mode:
            self._live = Live(render(StatusSnapshot()), console=self.console, refresh_per_second=2, transient=False)
            self._live.start()

    def update(self, snapshot: StatusSnapshot, *, force: bool = False) -> None:
        if self._live is not None:
            self._live.update(render(snapshot))
            return
        now = time.monotonic()
        if force or now - self._last_line >= self.every_s:
            self._last_line = now
            self._print(plain_line(snapshot))

    def event(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text, markup=False, soft_wrap=True)
        else:
            self._print(text)

    def _print(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        self.console.print(f"{stamp} {text}", markup=False, soft_wrap=True, highlight=False)
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

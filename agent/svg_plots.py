"""Tiny inline-SVG charts for the campaign report: line charts over time and horizontal bars.

Why our own: the report must be one static file a person opens from disk (no server, no CDN,
no JavaScript), and NNForge should not need matplotlib to write it. Each function returns an
`<svg>` element as text that is also well-formed XML, so tests can parse it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
FONT = "font-family=\"system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif\""


@dataclass(frozen=True)
class Series:
    name: str
    points: tuple[tuple[float, float], ...]  # (x, y), x ascending
    color: str | None = None
    step: bool = False  # draw as a staircase (counts that jump)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 2.5, 5 × 10^k steps)."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        lo, hi = 0.0, 1.0
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    v = start
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    if ticks[-1] < hi:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def fmt_num(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if float(v).is_integer():
        return str(int(v))
    return f"{v:.3g}"


def _text(x: float, y: float, s: str, *, anchor: str = "start", size: int = 11, color: str = "#333",
          weight: str = "normal", extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="{color}" '
            f'font-weight="{weight}" {FONT}{extra}>{escape(s)}</text>')


def _empty(width: int, height: int, title: str, message: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img"><title>{escape(title)}</title>'
            f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" fill="#fff" stroke="#ddd"/>'
            + _text(12, 20, title, size=13, weight="bold")
            + _text(width / 2, height / 2, message, anchor="middle", color="#888") + "</svg>")


def line_chart(series: list[Series], *, title: str, x_label: str = "minutes", y_label: str = "",
               width: int = 560, height: int = 260, y_min: float | None = 0.0, x_min: float | None = 0.0) -> str:
    """Lines over a shared x axis, with axes, ticks, a legend and the last value of each line."""
    drawn = [s for s in series if s.points]
    if not drawn:
        return _empty(width, height, title, "no data yet")
    left, right, top, bottom = 56, 16, 34 + 14 * ((len(drawn) - 1) // 3 + 1), 38
    pw, ph = width - left - right, height - top - bottom
    xs = [p[0] for s in drawn for p in s.points]
    ys = [p[1] for s in drawn for p in s.points]
    x_lo, x_hi = (min(xs) if x_min is None else min(x_min, min(xs))), max(xs)
    if x_hi - x_lo < 1e-9:
        x_hi = x_lo + 1.0
    y_lo = min(ys) if y_min is None else min(y_min, min(ys))
    y_hi = max(ys)
    yt = nice_ticks(y_lo, y_hi if y_hi > y_lo else y_lo + 1.0)
    xt = nice_ticks(x_lo, x_hi)
    xt = [t for t in xt if x_lo - 1e-9 <= t <= x_hi + 1e-9] or [x_lo, x_hi]
    y0, y1 = yt[0], yt[-1]

    def sx(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * pw

    def sy(y: float) -> float:
        return top + ph - (y - y0) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img"><title>{escape(title)}</title>',
           f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" fill="#fff" stroke="#ddd"/>',
           _text(12, 20, title, size=13, weight="bold")]
    for t in yt:
        y = sy(t)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(_text(left - 6, y + 4, fmt_num(t), anchor="end", size=10, color="#666"))
    for t in xt:
        x = sx(t)
        out.append(f'<line x1="{x:.1f}" y1="{top + ph}" x2="{x:.1f}" y2="{top + ph + 4}" stroke="#999"/>')
        out.append(_text(x, top + ph + 16, fmt_num(t), anchor="middle", size=10, color="#666"))
    out.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#999"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#999"/>')
    out.append(_text(left + pw / 2, height - 6, x_label, anchor="middle", size=10, color="#666"))
    if y_label:
        out.append(_text(12, top + ph / 2, y_label, anchor="middle", size=10, color="#666",
                         extra=f' transform="rotate(-90 12 {top + ph / 2:.1f})"'))
    for i, s in enumerate(drawn):
        color = s.color or PALETTE[i % len(PALETTE)]
        pts: list[tuple[float, float]] = []
        for j, (x, y) in enumerate(s.points):
            if s.step and j > 0:
                pts.append((x, s.points[j - 1][1]))
            pts.append((x, y))
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        if len(pts) == 1:
            x, y = pts[0]
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>')
        else:
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2" '
                       f'stroke-linejoin="round"/>')
        lx = left + (i % 3) * (pw / 3)
        ly = 34 + 14 * (i // 3) - 4
        out.append(f'<rect x="{lx:.1f}" y="{ly - 8:.1f}" width="10" height="10" fill="{color}"/>')
        out.append(_text(lx + 14, ly + 1, f"{s.name} ({fmt_num(s.points[-1][1])})", size=11))
    out.append("</svg>")
    return "".join(out)


def bar_chart(bars: list[tuple[str, float, str]], *, title: str, value_label: str = "", width: int = 560,
              bar_height: int = 18, max_value: float | None = None, color: str = PALETTE[0],
              percent: bool = False) -> str:
    """Horizontal bars: (label, value, annotation) each; the annotation is printed after the bar."""
    if not bars:
        return _empty(width, 90, title, "no data yet")
    label_w = min(220, 16 + 7 * max(len(b[0]) for b in bars))
    top, gap = 34, 6
    height = top + len(bars) * (bar_height + gap) + 24
    longest_note = max(len(b[2]) for b in bars) + 8  # value text, two spaces and the note
    right = min(width // 2, 16 + int(6.2 * longest_note))
    pw = width - label_w - right
    vmax = max_value if max_value is not None else max((b[1] for b in bars), default=0.0)
    vmax = vmax if vmax > 0 else 1.0
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img"><title>{escape(title)}</title>',
           f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" fill="#fff" stroke="#ddd"/>',
           _text(12, 20, title, size=13, weight="bold")]
    for i, (label, value, note) in enumerate(bars):
        y = top + i * (bar_height + gap)
        w = max(0.0, value) / vmax * pw
        shown = label if len(label) <= 30 else label[:29] + "…"
        out.append(_text(label_w - 6, y + bar_height * 0.72, shown, anchor="end", size=11))
        out.append(f'<rect x="{label_w}" y="{y}" width="{max(w, 1.0 if value > 0 else 0.0):.1f}" height="{bar_height}" '
                   f'fill="{color}" rx="2"><title>{escape(label)}: {escape(note)}</title></rect>')
        value_text = f"{value * 100:.1f}%" if percent else fmt_num(value)
        out.append(_text(label_w + w + 6, y + bar_height * 0.72, f"{value_text}  {note}".rstrip(), size=10,
                         color="#444"))
    if value_label:
        out.append(_text(label_w + pw / 2, height - 8, value_label, anchor="middle", size=10, color="#666"))
    out.append("</svg>")
    return "".join(out)

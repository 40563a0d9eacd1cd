"""Server-side inline SVG charts for the static site: line/scatter charts with axes, units, legend, ref lines.

Every piece of text that reaches the SVG goes through markupsafe.escape, and every attribute is double
quoted, so a series name taken from a result renders as text. Colours are CSS classes (s0..s9), never
inline styles, so the pages work under a strict Content-Security-Policy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from markupsafe import Markup, escape

AxisKind = Literal["linear", "log", "time"]
N_COLOURS = 10


@dataclass
class Point:
    x: float
    y: float  # math.inf draws the point in the "not reached" band above the plot
    label: str = ""


@dataclass
class Series:
    name: str
    points: list[Point] = field(default_factory=list)
    line: bool = True  # join the points; history charts join, scatter does not
    group: str = ""  # series of one group share a colour and one legend entry (e.g. the seeds of a config)
    colour: int | None = None  # fixed palette slot, so one configuration has one colour on every chart of a page


@dataclass
class RefLine:
    y: float
    label: str


def _nice_step(span: float, max_ticks: int) -> float:
    raw = span / max(max_ticks, 1)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def linear_ticks(lo: float, hi: float, max_ticks: int = 6) -> list[float]:
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    step = _nice_step(hi - lo, max_ticks)
    start = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    ticks = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0**e
            if lo <= v <= hi:
                ticks.append(v)
    if len(ticks) > 8:
        ticks = [t for t in ticks if math.isclose(math.log10(t) % 1, 0, abs_tol=1e-9)] or ticks[::3]
    return ticks


_TIME_STEPS_S = (1, 5, 15, 60, 300, 900, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400,
                 14 * 86400, 30 * 86400, 91 * 86400, 182 * 86400, 365 * 86400)


def time_ticks(lo: float, hi: float, max_ticks: int = 6) -> tuple[list[float], str]:
    """Ticks on a UTC time axis (epoch seconds) and the strftime format that suits their spacing."""
    span = max(hi - lo, 1.0)
    step = next((s for s in _TIME_STEPS_S if span / s <= max_ticks), _TIME_STEPS_S[-1])
    fmt = "%H:%M:%S" if step < 60 else "%m-%d %H:%M" if step < 86400 else "%Y-%m-%d"
    start = math.ceil(lo / step) * step
    ticks = [float(t) for t in range(int(start), int(hi) + 1, int(step))]
    return ticks, fmt


def fmt_num(v: float) -> str:
    """Compact number for axes and tooltips: 3 significant figures, SI suffixes above 10^4."""
    if v == 0:
        return "0"
    if not math.isfinite(v):
        return "∞" if v > 0 else "-∞"
    a = abs(v)
    for div, suf in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k")):
        if a >= div:
            return f"{v / (div if div != 1e4 else 1e3):.3g}{suf}"
    if a >= 100:
        return f"{v:,.0f}"
    if a < 1e-3:
        return f"{v:.2e}"
    return f"{v:.3g}"


def _escape_text(text: str) -> str:
    """markupsafe.escape of a plain str, byte for byte, without making a Markup (a chart has a tooltip a point)."""
    if hasattr(text, "__html__"):
        return str(escape(text))
    return (text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;").replace("'", "&#39;")
            .replace('"', "&#34;"))


def _fmt_tick(v: float, kind: AxisKind, time_fmt: str) -> str:
    if kind == "time":
        return datetime.fromtimestamp(v, UTC).strftime(time_fmt)
    return fmt_num(v)


def tick_labels(ticks: Sequence[float], kind: AxisKind = "linear", time_fmt: str = "") -> list[str]:
    """One label a tick, no two alike: fmt_num's 3 significant figures once labelled every tick of a narrow axis
    (bits per token 9.026 .. 9.034) "9.03"; then as many decimals as it takes."""
    labels = [_fmt_tick(t, kind, time_fmt) for t in ticks]
    if kind == "linear" and len(set(labels)) < len(labels):
        for decimals in range(1, 13):
            labels = [f"{t:.{decimals}f}" for t in ticks]
            if len(set(labels)) == len(labels):
                break
    return labels


def line_chart(
    series: Sequence[Series],
    *,
    x_label: str,
    y_label: str,
    x_kind: AxisKind = "linear",
    y_kind: AxisKind = "linear",
    ref_lines: Sequence[RefLine] = (),
    width: int = 760,
    height: int = 300,
    title: str = "",
    chart_id: str = "",
    markers: Sequence[tuple[float, str]] = (),
    x_bands: Sequence[tuple[float, float, str]] = (),
) -> Markup:
    """An inline SVG line/scatter chart. Points at y=inf go into a labelled band above the plot. `markers`:
    (x, label) drawn as dashed vertical lines (change points found by suite/compare/history.py). `x_bands`:
    (x from, x to, label) shaded across the plot (a workload's reference convergence band, its RCP)."""
    finite = [p for s in series for p in s.points if math.isfinite(p.y) and math.isfinite(p.x)]
    has_inf = any(math.isinf(p.y) for s in series for p in s.points)
    xs = [p.x for s in series for p in s.points if math.isfinite(p.x) and (x_kind != "log" or p.x > 0)]
    if xs:
        xs += [x for lo, hi, _ in x_bands for x in (lo, hi) if math.isfinite(x) and (x_kind != "log" or x > 0)]
    ys = [p.y for p in finite] + [r.y for r in ref_lines if math.isfinite(r.y)]
    if y_kind == "log":
        ys = [y for y in ys if y > 0]
    groups: dict[str, int] = {}
    for s in series:
        groups.setdefault(s.group or s.name, s.colour if s.colour is not None else len(groups))
    legend = [(f"s{i % N_COLOURS}", name, False) for name, i in groups.items()]
    legend += [("ref-key", r.label, True) for r in ref_lines if math.isfinite(r.y)]
    legend = [(c, n if len(n) <= 48 else n[:47] + "…", ref) for c, n, ref in legend]
    left, right, bottom = 64, 16, 44
    # legend columns sized to the longest entry (6.3 px a character at 11 px is a safe over-estimate)
    col_w = max((len(n) for _, n, _ in legend), default=0) * 6.3 + 26
    per_row = max(1, int((width - left - right) // col_w)) if legend else 1
    legend_rows = math.ceil(len(legend) / per_row)
    top = 14 + 16 * legend_rows + (18 if has_inf else 0)
    pw, ph = width - left - right, height - top - bottom
    out: list[str] = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{_escape_text(title or y_label)}"'
        + (f' id="{_escape_text(chart_id)}"' if chart_id else "") + ">"
    ]
    if title:
        out.append(f"<title>{_escape_text(title)}</title>")
    if not xs or (not ys and not has_inf):
        out.append(f'<text class="empty" x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text></svg>')
        return Markup("".join(out))

    x_lo, x_hi = min(xs), max(xs)
    if x_kind == "time" and x_hi - x_lo < 3600:  # one submission (or a few in an hour): a day around them, not a second
        mid = (x_lo + x_hi) / 2
        x_lo, x_hi = mid - 43200, mid + 43200
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    time_fmt = ""
    if x_kind == "time":
        xt, time_fmt = time_ticks(x_lo, x_hi)
    elif x_kind == "log":
        x_lo, x_hi = 10 ** math.floor(math.log10(x_lo)), 10 ** math.ceil(math.log10(x_hi) + 1e-12)
        xt = log_ticks(x_lo, x_hi)
    else:
        x_lo = min(x_lo, 0.0) if x_lo >= 0 and x_lo < (x_hi - x_lo) else x_lo
        xt = linear_ticks(x_lo, x_hi)
        x_lo, x_hi = min(x_lo, xt[0]), max(x_hi, xt[-1])
    if ys:
        y_lo, y_hi = min(ys), max(ys)
    else:
        y_lo, y_hi = 0.0, 1.0
    if y_kind == "log":
        y_lo, y_hi = 10 ** math.floor(math.log10(y_lo)), 10 ** math.ceil(math.log10(y_hi) + 1e-12)
        if y_hi <= y_lo:
            y_hi = y_lo * 10
        yt = log_ticks(y_lo, y_hi)
    else:
        pad = (y_hi - y_lo) * 0.05 or abs(y_hi) * 0.05 or 1.0
        y_lo, y_hi = (0.0 if y_lo >= 0 and y_lo - pad < 0 else y_lo - pad), y_hi + pad
        yt = linear_ticks(y_lo, y_hi)
        y_lo, y_hi = min(y_lo, yt[0]), max(y_hi, yt[-1])

    def sx(x: float) -> float:
        if x_kind == "log":
            return left + (math.log10(max(x, x_lo)) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo)) * pw
        return left + (x - x_lo) / (x_hi - x_lo) * pw

    def sy(y: float) -> float:
        if math.isinf(y):
            return top - 10
        if y_kind == "log":
            return top + ph - (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)) * ph
        return top + ph - (y - y_lo) / (y_hi - y_lo) * ph

    # grid, ticks, axes
    out.append('<g class="grid">')
    for t in yt:
        y = sy(t)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}"/>')
    out.append("</g><g class=\"axis\">")
    for t, text in zip(yt, tick_labels(yt, "log" if y_kind == "log" else "linear"), strict=True):
        out.append(f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{_escape_text(text)}</text>')
    shown_xt = [t for t in xt if x_lo <= t <= x_hi]
    for t, text in zip(shown_xt, tick_labels(shown_xt, x_kind, time_fmt), strict=True):
        x = sx(t)
        out.append(f'<line class="tick" x1="{x:.1f}" x2="{x:.1f}" y1="{top + ph}" y2="{top + ph + 4}"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{_escape_text(text)}</text>')
    out.append(f'<line class="frame" x1="{left}" x2="{left}" y1="{top}" y2="{top + ph}"/>')
    out.append(f'<line class="frame" x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}"/>')
    out.append(f'<text class="label" x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">{_escape_text(x_label)}</text>')
    out.append(f'<text class="label" transform="translate(14 {top + ph / 2}) rotate(-90)" '
               f'text-anchor="middle">{_escape_text(y_label)}</text>')
    if has_inf:
        out.append(f'<text class="inf-label" x="{left + 4}" y="{top - 14}">not reached ↓</text>')
        out.append(f'<line class="inf-band" x1="{left}" x2="{left + pw}" y1="{top - 10}" y2="{top - 10}"/>')
    out.append("</g>")
    for lo, hi, label in x_bands:
        if math.isfinite(lo) and math.isfinite(hi) and (x_kind != "log" or lo > 0):
            x1, x2 = sx(lo), sx(hi)
            out.append(f'<g class="rcp-band"><rect x="{x1:.1f}" y="{top}" width="{max(x2 - x1, 1.0):.1f}" '
                       f'height="{ph}"/><text x="{x1 + 3:.1f}" y="{top + 12}">{_escape_text(label)}</text>'
                       f"<title>{_escape_text(label)}</title></g>")
    for r in ref_lines:
        if not math.isfinite(r.y) or (y_kind == "log" and r.y <= 0):
            continue
        y = sy(r.y)
        out.append(f'<g class="ref"><line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text x="{left + pw - 4}" y="{y - 4:.1f}" text-anchor="end">{_escape_text(r.label)}</text></g>')
    # series: the points' coordinates in one pass each (the same arithmetic as sx/sy, without a call a point)
    ok_x = (lambda x: x > 0 and x != math.inf) if x_kind == "log" else math.isfinite
    for s in series:
        cls = f"s{groups[s.group or s.name] % N_COLOURS}"
        out.append(f'<g class="series {cls}" data-series="{_escape_text(s.name)}">')
        pts = [p for p in s.points if ok_x(p.x)]
        px = [sx(p.x) for p in pts] if x_kind == "log" else [left + (p.x - x_lo) / (x_hi - x_lo) * pw for p in pts]
        py = [sy(p.y) for p in pts]
        if s.line:
            run = [f"{x:.1f},{y:.1f}" for p, x, y in zip(pts, px, py, strict=True) if math.isfinite(p.y)]
            if len(run) > 1:
                out.append(f'<polyline points="{" ".join(run)}"/>')
        for p, x, y in zip(pts, px, py, strict=True):
            tip = _escape_text(p.label or f"{s.name}: {fmt_num(p.y)}")
            if p.y == math.inf or p.y == -math.inf:
                out.append(f'<path class="pt inf" d="M{x - 4:.1f},{y - 4:.1f}l8,8m0,-8l-8,8"><title>{tip}</title></path>')
            else:
                out.append(f'<circle class="pt" cx="{x:.1f}" cy="{y:.1f}" r="3"><title>{tip}</title></circle>')
        out.append("</g>")
    for mx, label in markers:  # change points: a dashed line where the new level starts
        if math.isfinite(mx) and (x_kind != "log" or mx > 0):
            x = sx(mx)
            out.append(f'<g class="change-point"><line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" '
                       f'stroke-dasharray="4 3"/><title>{_escape_text(label)}</title></g>')
    # legend above the plot, as many entries a row as fit
    if legend:
        out.append('<g class="legend">')
        for i, (cls, name, is_ref) in enumerate(legend):
            lx, ly = left + (i % per_row) * col_w, 12 + 16 * (i // per_row)
            mark = (f'<line x1="{lx:.1f}" x2="{lx + 10:.1f}" y1="{ly - 3}" y2="{ly - 3}"/>' if is_ref
                    else f'<rect x="{lx:.1f}" y="{ly - 8}" width="10" height="10"/>')
            out.append(f'<g class="{cls}">{mark}<text x="{lx + 14:.1f}" y="{ly + 1}">{_escape_text(name)}</text></g>')
        out.append("</g>")
    out.append("</svg>")
    return Markup("".join(out))

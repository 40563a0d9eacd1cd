"""A workload's wall-clock account over its history, and what an injected fault cost (issue 48).

Each run's account (Result.goodput) reaches the site through the index's `goodput` column (suite/results/index/rows.py:
the parts, goodput, the recovery summary and the spec's `faults:` block, as JSON), so the index and the file walk give
the same page. A submission's point is the mean of each part over its seeds that measured one; the chart draws one
stacked bar per submission, per hardware × backend × precision, in the order of the submissions. The leaderboard of a
fault scenario (a spec with `faults:`) shows the fault, how many seeds recovered and the time the failure cost.

Inline SVG, colours as `fill` attributes (the page's Content-Security-Policy forbids style attributes), a <title> per
segment for the browser's tooltip.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from markupsafe import Markup, escape

from suite.results.index.rows import goodput_of as account_of
from suite.site.charts import fmt_num, linear_ticks
from suite.site.goodput_bar import COLOURS, LABELS

# the parts a failure costs (docs/metrics.md): the work done after the last checkpoint and redone, the gap until the
# job was running again, and the restore itself
FAILURE_PARTS = ("lost_s", "recovery_s", "checkpoint_restore_s")
MAX_BARS = 60  # the newest submissions of a series a chart draws (older ones are in the month pages' run lists)


class _Row(Protocol):  # suite.site.data.RunRow, as far as this module reads it
    goodput: str | None
    status: str


def _parts(account: dict[str, Any]) -> dict[str, float]:
    parts = account.get("parts_s")
    if not isinstance(parts, dict):
        return {}
    return {k: float(v) for k, v in parts.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def mean_parts(runs: Iterable[_Row]) -> dict[str, float] | None:
    """Each part's mean over the runs that recorded an account; None when none did."""
    accounts = [p for p in (_parts(account_of(rr.goodput)) for rr in runs) if p]
    if not accounts:
        return None
    names = list(dict.fromkeys(k for p in accounts for k in p))
    return {k: math.fsum(p.get(k, 0.0) for p in accounts) / len(accounts) for k in names}


# ---- the chart over time --------------------------------------------------------------------------------------


class _Summary(Protocol):  # suite.site.data.SubSummary
    series: str
    timestamp: float
    sha: str
    runs: int
    goodput_parts: dict[str, float] | None


def _bars_chart(name: str, subs: Sequence[_Summary], chart_id: str, width: int, height: int = 240) -> str:
    left, right, top, bottom = 58, 12, 26, 40
    pw, ph = width - left - right, height - top - bottom
    totals = [math.fsum(max(0.0, v) for v in (s.goodput_parts or {}).values()) for s in subs]
    hi = max(totals, default=0.0) or 1.0
    ticks = [t for t in linear_ticks(0.0, hi) if 0 <= t <= hi * 1.0001]
    y_max = max(hi * 1.06, ticks[-1] if ticks else hi)  # the tallest bar stays inside the frame
    slot = pw / len(subs)
    bar_w = max(2.0, min(28.0, slot * 0.7))

    def sy(v: float) -> float:
        return top + ph - ph * v / y_max

    out = [f'<svg class="chart goodput-history" id="{chart_id}" xmlns="http://www.w3.org/2000/svg" '
           f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'data-series="{escape(name)}"><title>where the wall clock went, per submission: {escape(name)}</title>',
           f'<text class="title" x="{left}" y="16">Wall clock per run: {escape(name)}</text>', '<g class="grid">']
    for t in ticks:
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(t):.1f}" y2="{sy(t):.1f}"/>')
    out.append('</g><g class="axis">')
    for t in ticks:
        out.append(f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{fmt_num(t)}</text>')
    out.append(f'<line class="frame" x1="{left}" x2="{left}" y1="{top}" y2="{top + ph}"/>'
               f'<line class="frame" x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}"/>'
               f'<text class="label" transform="translate(14 {top + ph / 2}) rotate(-90)" text-anchor="middle">'
               'seconds, mean over seeds</text>')
    for i in sorted({0, len(subs) - 1}):
        x = left + slot * (i + 0.5)
        day = datetime.fromtimestamp(subs[i].timestamp, UTC).strftime("%Y-%m-%d")
        out.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{day}</text>')
    out.append(f'<text class="label" x="{left + pw / 2}" y="{height - 4}" text-anchor="middle">'
               'submissions, oldest to newest</text></g>')
    for i, (s, total) in enumerate(zip(subs, totals, strict=True)):
        parts = s.goodput_parts or {}
        x = left + slot * (i + 0.5) - bar_w / 2
        steps = parts.get("steps_s", 0.0)
        day = datetime.fromtimestamp(s.timestamp, UTC).strftime("%Y-%m-%d %H:%M")
        tip = (f"{s.sha[:10]} ({day} UTC, {s.runs} run{'s' if s.runs != 1 else ''}): {total:.3g} s, goodput "
               f"{steps / total:.1%}" if total > 0 else f"{s.sha[:10]}: no time recorded")
        out.append(f'<g class="bar" data-sub="{i}" data-total="{total:.6g}"><title>{escape(tip)}</title>')
        y = float(top + ph)
        for part, seconds in parts.items():
            if seconds <= 0:
                continue
            h = ph * seconds / y_max
            y -= h
            out.append(f'<rect data-part="{escape(part)}" x="{x:.2f}" y="{y:.2f}" width="{bar_w:.2f}" '
                       f'height="{max(h, 0.3):.2f}" fill="{COLOURS.get(part, "#bdbdbd")}"><title>'
                       f'{escape(LABELS.get(part, part))}: {seconds:.3g} s ({seconds / total:.1%})</title></rect>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def history_charts(history: Sequence[_Summary], width: int = 660) -> list[Markup]:
    """One stacked-bar chart per series whose submissions recorded an account (the newest MAX_BARS of them), with
    one legend of the parts they show; [] when no submission has an account."""
    by_series: dict[str, list[_Summary]] = {}
    for s in history:
        if s.goodput_parts:
            by_series.setdefault(s.series, []).append(s)
    if not by_series:
        return []
    out = []
    shown: dict[str, None] = {}
    for n, (name, subs) in enumerate(sorted(by_series.items())):
        subs = subs[-MAX_BARS:]
        for s in subs:
            shown.update({p: None for p, v in (s.goodput_parts or {}).items() if v > 0})
        out.append(Markup(_bars_chart(name, subs, f"chart-goodput-{n}", width)))
    legend = "".join(f'<li data-part="{escape(p)}"><svg width="10" height="10" aria-hidden="true"><rect width="10" '
                     f'height="10" fill="{COLOURS.get(p, "#bdbdbd")}"/></svg> {escape(LABELS.get(p, p))}</li>'
                     for p in COLOURS if p in shown)
    out.append(Markup(f'<ul class="goodput-legend inline small" id="goodput-history-legend">{legend}</ul>'))
    return out


# ---- the fault scenario's leaderboard column ------------------------------------------------------------------


@dataclass(frozen=True)
class FaultFigures:
    """What a fault scenario's leaderboard row shows: the fault, the seeds that recovered from a failure, the time
    the failures cost (median over seeds of work lost + recovery + restore) and the time to recover."""

    fault: str
    failures: bool  # the scenario kills a rank: a run either recovered or not
    recovered: int
    runs: int
    restarts: int
    time_lost_s: float | None
    time_to_recover_s: float | None


def describe(faults: dict[str, Any]) -> str:
    """A spec's `faults:` block in words: "kill rank 1 at step 25 · stall loader 0.5 s at batch 5"."""
    said = []
    if faults.get("kill_rank") is not None:
        said.append(f"kill rank {faults['kill_rank']} at step {faults.get('kill_at_step')}")
    if faults.get("slow_rank") is not None and faults.get("slow_percent"):
        said.append(f"slow rank {faults['slow_rank']} by {fmt_num(float(faults['slow_percent']))}%")
    if faults.get("stall_loader_s"):
        every = f", then every {faults['stall_every']}" if faults.get("stall_every") else ""
        said.append(f"stall loader {fmt_num(float(faults['stall_loader_s']))} s at batch "
                    f"{faults.get('stall_at_step', 1)}{every}")
    return " · ".join(said)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def fault_figures(runs: Sequence[_Row]) -> FaultFigures | None:
    """The row's fault figures, or None when its runs declared no fault."""
    accounts = [account_of(rr.goodput) for rr in runs]
    faults = next((a["faults"] for a in accounts if isinstance(a.get("faults"), dict) and a["faults"]), None)
    if faults is None or not describe(faults):  # a `faults:` block left at its defaults injects nothing
        return None
    failures = faults.get("kill_rank") is not None
    recovered = restarts = 0
    lost, ttr = [], []
    for rr, a in zip(runs, accounts, strict=True):
        got = a.get("recovery")
        rec: dict[str, Any] = got if isinstance(got, dict) else {}
        n = int(rec.get("restarts") or 0)
        restarts += n
        if n and rr.status in ("reached", "budget"):
            recovered += 1
        parts = _parts(a)
        if parts:
            lost.append(math.fsum(parts.get(p, 0.0) for p in FAILURE_PARTS))
        times = [t for t in rec.get("time_to_recover_s") or [] if isinstance(t, int | float)]
        if times:
            ttr.append(math.fsum(times))
    return FaultFigures(describe(faults), failures, recovered, len(runs), restarts, _median(lost), _median(ttr))

"""Page content for the static site: number formatting (the jinja filters), the SVG charts of each page,
and the escaped table bodies that are built in Python because a run page has hundreds of rows.

Everything that takes text from a result escapes it here (html.escape / markupsafe) or leaves it to
jinja2's autoescape; nothing returns unescaped result text as Markup.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup

from suite.results.record import Result
from suite.site import charts, downsample
from suite.site.cells import cell_text, flatten
from suite.site.data import (
    RunRow,
    Submission,
    SubSummary,
    Workload,
    short_hash,
    target_metric,
    target_of,
    target_value,
)

MAX_CURVES = 24  # convergence curves drawn per workload page, shared between configurations
CHART_W = 660  # two history charts side by side on a 1440 px screen


# ---- formatting (jinja filters) -------------------------------------------------------------------------


def fmt_s(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if math.isinf(v):
        return "∞"
    if v < 1:
        return f"{v:.3f}"
    if v < 100:
        return f"{v:.2f}"
    if v < 10000:
        return f"{v:.1f}"
    return f"{v:,.0f}"


def fmt_pct(v: float | None) -> str:
    return "—" if v is None or math.isnan(v) else f"{100 * v:.1f}%"


def fmt_num(v: Any, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if not isinstance(v, int | float) or isinstance(v, bool):
        return cell_text(v)
    return charts.fmt_num(float(v)) + (f" {unit}" if unit else "")


def fmt_date(d: datetime) -> str:
    return d.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def sort_value(v: float | None) -> str:
    """data-sort for numeric cells: the JS sorts on this, 'Infinity' after every number, blank last."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return "Infinity" if math.isinf(v) else repr(float(v))


# ---- charts for the pages -------------------------------------------------------------------------------


def palette(w: Workload) -> dict[str, int]:
    """One colour per hardware × backend × precision across every chart of a workload page."""
    return {name: i for i, name in enumerate(sorted({s.series for s in w.featured}))}  # each series has one


def change_markers(series: list, cache: dict[str, Any] | None = None, used: dict[str, Any] | None = None
                   ) -> list[tuple[float, str]]:
    """(x, label) of each change point in each series (suite/compare/history.py: ruptures + a permutation test). `cache`:
    the segment tests of the last build (only a segment whose points changed is tested again); `used` receives
    every segment test this call made or reused."""
    from suite.compare.history import MIN_SEGMENT, change_points

    marks = []
    for s in series:
        pts = sorted((p for p in s.points if math.isfinite(p.y) and p.y > 0), key=lambda p: p.x)
        if len(pts) < 2 * MIN_SEGMENT:
            continue
        for cp in change_points([p.y for p in pts], cache=cache, used=used):
            before, after = pts[cp.index - 1].y, pts[cp.index].y
            marks.append((pts[cp.index].x, f"change point in {s.name}: {before:.4g} -> {after:.4g} "
                                           f"(p {cp.p_value:.3g}); see `trainbench history`"))
    return marks


def history_charts(w: Workload, cache: dict[str, Any] | None = None, used: dict[str, Any] | None = None) -> list:
    """The time-to-target and MFU charts over every submission (w.history), change points marked."""
    colours = palette(w)
    by_series: dict[str, list[SubSummary]] = {}
    for s in w.history:
        by_series.setdefault(s.series, []).append(s)
    tta = [charts.Series(name, [charts.Point(s.timestamp, s.tta_olympic_s,
                                             f"{name} @ {s.sha[:10]}: {fmt_s(s.tta_olympic_s)} s "
                                             f"({s.reached}/{s.runs} reached)") for s in subs],
                         colour=colours[name])
           for name, subs in sorted(by_series.items())]
    finite = [p.y for s in tta for p in s.points if math.isfinite(p.y) and p.y > 0]
    log = bool(finite) and max(finite) / min(finite) > 30
    out = [charts.line_chart(tta, x_label="date (UTC)", y_label="time to target, olympic mean (s)", x_kind="time",
                             y_kind="log" if log else "linear", title="Time to target over time",
                             width=CHART_W, chart_id="chart-tta-history", markers=change_markers(tta, cache, used))]
    mfu = [charts.Series(name, [charts.Point(s.timestamp, 100 * s.mfu_median,
                                             f"{name} @ {s.sha[:10]}: MFU {fmt_pct(s.mfu_median)}")
                                for s in subs if s.mfu_median is not None], colour=colours[name])
           for name, subs in sorted(by_series.items())]
    mfu = [s for s in mfu if s.points]
    if mfu:
        out.append(charts.line_chart(mfu, x_label="date (UTC)", y_label="MFU, median over seeds (%)", x_kind="time",
                                     title="MFU over time", width=CHART_W, chart_id="chart-mfu-history"))
    return out


Curve = list[tuple[int, float, float]]  # (step, elapsed_s, value) of one run's target metric, in curve order
Picks = tuple[list[tuple[str, RunRow]], "str | None"]  # the (configuration, run) curves a chart draws, and the metric
# runs and a metric per chart -> each chart's curves by run rel (from the index's series table in one connection,
# or from the Results of a file walk)
CurveSource = Callable[[list[tuple[list[RunRow], "str | None"]]], list[dict[str, Curve]]]


def result_curve(r: Result, metric: str | None) -> Curve:
    return [(p.step, p.elapsed_s, p.metrics[metric]) for p in r.eval_curve if metric in p.metrics]  # type: ignore[index]


def convergence_picks(w: Workload) -> Picks:
    """Seeds of the newest submission per configuration: MAX_CURVES curves shared out, at least one each."""
    latest: dict[str, Submission] = {}
    for s in w.featured:
        if s.series not in latest or s.timestamp > latest[s.series].timestamp:
            latest[s.series] = s
    per_series = max(1, MAX_CURVES // max(1, len(latest)))
    return [(name, rr) for name, sub in sorted(latest.items()) for rr in sub.runs[:per_series]], target_metric(w.target)


def convergence_chart(w: Workload, picks: Picks, points: dict[str, Curve]) -> tuple[Any, int]:
    """The chart of the picked runs' curves (`points`: only these runs' curves are read)."""
    colours = palette(w)
    picked, metric = picks
    series = [charts.Series(f"{name} · seed {rr.seed}", _points(points.get(rr.rel, []), metric, target=w.target),
                            group=name, colour=colours[name]) for name, rr in picked]
    target = target_value(w.target)
    refs = [charts.RefLine(target, f"target {metric} {charts.fmt_num(target)}")] if target is not None else []
    ends = [s.points[-1].x for s in series if s.points and s.points[-1].x > 0]
    log_x = bool(ends) and max(ends) / min(ends) > 20  # one slow device would squash every other curve
    label = "time since run start, on the TTA clock (s" + (", log scale)" if log_x else ")")
    return charts.line_chart(series, x_label=label, y_label=f"eval {metric}", x_kind="log" if log_x else "linear",
                             ref_lines=refs, title="Convergence (latest submission per hardware × backend)",
                             width=2 * CHART_W, chart_id="chart-convergence"), len(series)


def rcp_chart(w: Workload, picks: Picks, points: dict[str, Curve]) -> Any:
    """The convergence chart by samples (step x the RCP's global batch size) of the runs of the RCP's spec, with the
    reference's band (olympic mean +- one standard deviation of its samples to target) and the line below which a
    10-seed candidate converged significantly faster (mlperf_logging's checker, suite/compare/rcp_guard.py)."""
    from suite.compare import rcp_guard

    rcp = w.rcp
    if rcp is None:
        return None
    picked, metric = picks
    colours = palette(w)
    bs = rcp.global_batch_size
    series = []
    for name, rr in picked:
        if rr.spec_hash != rcp.spec_hash:
            continue
        pts = [charts.Point(step * bs, value, f"{step * bs:,} samples (step {step}): {metric} {value:.4g}")
               for step, _, value in points.get(rr.rel, [])]
        series.append(charts.Series(f"{name} · seed {rr.seed}", pts, group=name, colour=colours[name]))
    c = rcp_guard._checker(rcp.as_mlperf(), rcp.benchmark, max(3, len(rcp.samples_to_target) // 2))
    ref = next(iter(c.rcp_data.values()))
    mean, sd, fastest = float(ref["RCP Mean"]), float(ref["RCP Stdev"]), float(ref["Min Epochs"])
    target = target_value(w.target)
    refs = [charts.RefLine(target, f"target {metric} {charts.fmt_num(target)}")] if target is not None else []
    band = (mean - sd, mean + sd, f"RCP {charts.fmt_num(mean)} ± {charts.fmt_num(sd)} samples "
            f"({len(rcp.samples_to_target)} seeds, batch {bs})")
    return charts.line_chart(series, x_label=f"samples (steps x global batch {bs})", y_label=f"eval {metric}",
                             ref_lines=refs, x_bands=[band],
                             markers=[(fastest, f"below {charts.fmt_num(fastest)} samples a {len(rcp.seeds) // 2}"
                                       "-seed mean converged significantly faster than the reference")],
                             title="Convergence by samples against the reference (RCP)", width=2 * CHART_W,
                             chart_id="chart-convergence-rcp")


def _points(curve: Curve, metric: str | None, max_points: int = downsample.MAX_CURVE_POINTS,
            target: dict[str, Any] | None = None) -> list[charts.Point]:
    """The chart points of a curve, down-sampled past `max_points` (the target's crossing kept)."""
    target = target or {}
    aimed = target.get("metric") == metric
    keep = downsample.keep_indices([v for _, _, v in curve], max_points, target_value(target) if aimed else None,
                                   target.get("mode") if aimed else None)
    return [charts.Point(elapsed, value, f"step {step}, {elapsed:.3g} s: {metric} {value:.4g}")
            for step, elapsed, value in (curve[i] for i in keep)]


def _curve_points(r: Result, metric: str | None) -> list[charts.Point]:
    return _points(result_curve(r, metric), metric, downsample.MAX_CHART_POINTS, target_of(r))


def eval_names(r: Result) -> list[str]:
    metric = target_metric(target_of(r))
    return sorted({k for p in r.eval_curve for k in p.metrics}, key=lambda k: (k != metric, k))


def run_charts(r: Result) -> list:
    target = target_of(r)
    metric, value = target_metric(target), target_value(target)
    out = []
    for name in eval_names(r):
        refs = []
        if name == metric and value is not None:
            refs = [charts.RefLine(value, f"target {charts.fmt_num(value)}")]
        out.append(charts.line_chart([charts.Series(f"seed {r.seed}", _curve_points(r, name))],
                                     x_label="time since run start, on the TTA clock (s)", y_label=f"eval {name}",
                                     ref_lines=refs, width=620, height=260, title=f"eval {name}",
                                     chart_id=f"chart-{short_hash(name)}"))
    return out


# ---- table bodies -------------------------------------------------------------------------------------


def kv_rows(items: Iterable[tuple[Any, Any]], mono: bool = False) -> Markup:
    """<tr><th>key</th><td>value</td></tr> rows, escaped here in one pass: a run page has hundreds of them
    and a jinja macro call per row made 10,000 run pages take several times longer."""
    cls = ' class="mono"' if mono else ""
    texts: list[str] = []
    for k, v in items:
        texts += (str(k), cell_text(v, 2000))
    # one html.escape over every text joined by NULs (escape neither makes nor eats one), split again; a text
    # that holds a NUL itself is escaped on its own
    joined = "\x00".join(texts)
    parts = (html.escape(joined).split("\x00") if joined.count("\x00") == len(texts) - 1
             else [html.escape(t) for t in texts])
    it = iter(parts)
    return Markup("".join([f"<tr><th{cls}>{k}</th><td{cls}>{v}</td></tr>" for k, v in zip(it, it, strict=True)]))


def eval_shown(r: Result, names: list[str]) -> list[int]:
    """Which evaluations the run page's table lists: all, or past MAX_TABLE_ROWS those down-sampled on the
    first metric (the target's, when the run has one)."""
    if len(r.eval_curve) <= downsample.MAX_TABLE_ROWS or not names:
        return list(range(len(r.eval_curve)))
    target = target_of(r)
    aimed = target.get("metric") == names[0]
    values = [p.metrics.get(names[0], math.nan) for p in r.eval_curve]
    return downsample.keep_indices(values, downsample.MAX_TABLE_ROWS, target_value(target) if aimed else None,
                                   target.get("mode") if aimed else None)


def eval_rows(r: Result, names: list[str], shown: list[int] | None = None) -> Markup:
    """The evaluations table body (numbers only, built here for speed like kv_rows): the rows `shown`."""
    out = []
    for p in r.eval_curve if shown is None else (r.eval_curve[i] for i in shown):
        cells = [f'<td class="num">{p.step}</td><td class="num">{p.samples}</td>',
                 f'<td class="num" data-sort="{sort_value(p.elapsed_s)}">{fmt_s(p.elapsed_s)}</td>',
                 f'<td class="num" data-sort="{sort_value(p.train_s)}">{fmt_s(p.train_s)}</td>']
        for n in names:
            v = p.metrics.get(n)
            cells.append(f'<td class="num" data-sort="{sort_value(v)}">{"—" if v is None else f"{v:.4g}"}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    return Markup("".join(out))


def record_tables(r: Result) -> dict[str, Any]:
    """Every field of the result: scalars in one table, each dict in its own, lists and config apart."""
    data = r.model_dump(mode="json", exclude={"config", "eval_curve", "warnings"})
    scalars = kv_rows((k, v) for k, v in data.items() if not isinstance(v, dict | list))
    dicts = {k: kv_rows(flatten(v).items()) for k, v in data.items() if isinstance(v, dict) and v}
    return {"scalars": scalars, "dicts": dicts}

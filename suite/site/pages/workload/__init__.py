"""The workload pages and their month pages (w/<workload>.html, w/<workload>-<YYYY-MM>.html; templates
workload.html and month.html beside this file): the workload page shows the leaderboards, the history, the convergence
and the submissions and runs of the newest month; each earlier month's submissions and runs are on a page of
their own, which a later build keeps unrendered while its results are unchanged (a night's new runs land in the
newest month, so an incremental build renders O(new runs) rows, not every run ever made). What is rendered is
decided by suite.site.months.plan. Not a `render(job, site)` page: build.py calls `workload_pages` with the
plan and the change-point tests of the last build, which it writes into the manifest."""

from __future__ import annotations

from typing import Any

from suite.site import goodput_history
from suite.site import months as site_months
from suite.site.job import Job, render_page
from suite.site.months import Plan, UnitPlan
from suite.site.render import (
    MAX_CURVES,
    CurveSource,
    convergence_chart,
    convergence_picks,
    history_charts,
    rcp_chart,
)
from suite.site.tables import phase_rows, run_rows, submission_rows


def workload_pages(job: Job, plan: Plan, curves: CurveSource, old_cp: dict[str, Any]
                   ) -> tuple[list[str], dict[str, Any], int]:
    """Render the month pages and workload pages the plan marks: (the workload and month pages there are, the
    change-point tests of every workload page's history (kept pages keep theirs), the count rendered)."""
    written: list[str] = []
    cp: dict[str, Any] = {}
    rendered = 0
    by_w: dict[str, list[UnitPlan]] = {}
    for up in plan.units:
        by_w.setdefault(up.w.name, []).append(up)
        if up.page != up.w.page:
            written.append(up.page)
        if up.render:
            w, m = up.w, up.unit.month
            rendered += 1
            render_page(job, up.page, "month.html", w=w, month=m,
                              sub_rows=submission_rows(w.month_subs[m], "../"),
                              run_rows=run_rows(w.month_runs[m], "../"))
    todo = []
    for ups in by_w.values():
        w = ups[0].w
        written.append(w.page)
        if w.page in plan.workload_pages:
            todo.append((w, ups))
        else:
            old = old_cp.get(w.page)
            cp[w.page] = old if isinstance(old, dict) else {}
    picks = [convergence_picks(w) for w, _ in todo]
    points = curves([([rr for _, rr in picked], metric) for picked, metric in picks]) if todo else []
    for (w, ups), pick, pts in zip(todo, picks, points, strict=True):
        rendered += 1
        w.history = site_months.history(w, ups)
        cache = old_cp.get(w.page)
        used: dict[str, Any] = {}
        charts = history_charts(w, cache if isinstance(cache, dict) else None, used)
        cp[w.page] = used
        curve, n_curves = convergence_chart(w, pick, pts)
        newest = w.newest
        earlier = [(up.unit.month, up.page, up.unit.n_runs) for up in ups if up.unit.month != newest]
        render_page(job, w.page, "workload.html", w=w, history=charts, convergence=curve, n_curves=n_curves,
                          rcp_chart=rcp_chart(w, pick, pts), goodput_history=goodput_history.history_charts(w.history),
                          max_curves=MAX_CURVES, month=newest, months=earlier,
                          sub_rows=submission_rows(w.month_subs[newest], "../"),
                          run_rows=run_rows(w.month_runs[newest], "../"),
                          phase_rows=phase_rows(w.month_runs[newest], "../"))
    return written, cp, rendered

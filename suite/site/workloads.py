"""Workload pages and their month pages: the workload page shows the leaderboards, the history, the convergence
and the submissions and runs of the newest month; each earlier month's submissions and runs are on a page of
their own, which a later build keeps unrendered while its runs are unchanged (a night's new runs land in the
newest month, so an incremental build renders O(new runs) rows, not every run ever made)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from suite.site import pages
from suite.site.data import RunRow, Submission, Workload, month_page
from suite.site.pages import Job
from suite.site.render import MAX_CURVES, CurveSource, convergence_chart, convergence_picks, history_charts
from suite.site.tables import run_rows, submission_rows


def digest(*parts: Any) -> str:
    return hashlib.sha1(json.dumps(parts, default=str).encode("utf-8", "surrogatepass")).hexdigest()


def _inputs(subs: list[Submission], runs: list[RunRow]) -> list[Any]:
    """What a month's tables show: each submission (its key and its seeds' signatures: a seed may have been
    run in the next month) and each run's signature."""
    return [[(s.spec_hash, s.hardware, s.backend, s.precision, s.sha, [rr.sig for rr in s.runs]) for s in subs],
            [rr.sig for rr in runs]]


def workload_pages(job: Job, workloads: list[Workload], common: str, old_pages: dict[str, Any],
                   curves: CurveSource) -> tuple[list[str], dict[str, str], int]:
    """Render every workload and month page whose input digest changed since the last build (`old_pages`):
    (the files written or kept, the digest of every page, the count rendered)."""
    out: Path = job.out
    written: list[str] = []
    digests: dict[str, str] = {}
    rendered = 0

    def kept(page: str, d: str) -> bool:
        digests[page] = d
        if old_pages.get(page) == d and (out / page).is_file():
            written.append(page)
            return True
        return False

    todo: list[tuple[Workload, str, list[Any], Any]] = []  # the workload pages to render: newest month, earlier
    for w in workloads:
        months = w.months()
        newest = max(months)
        earlier = []
        for month, (subs, runs) in months.items():
            if month == newest:
                continue
            page = month_page(w.name, month)
            earlier.append((month, page, len(runs)))
            if kept(page, digest(common, w.name, month, _inputs(subs, runs))):
                continue
            rendered += 1
            written.append(pages.render_page(job, page, "month.html", w=w, month=month,
                                             sub_rows=submission_rows(subs, "../"), run_rows=run_rows(runs, "../")))
        if not kept(w.page, digest(common, w.name, [(b.path, repr(b.agg)) for b in w.baselines],
                                   [rr.sig for rr in w.runs], earlier)):
            todo.append((w, newest, earlier, months[newest]))
    picks = [convergence_picks(w) for w, _, _, _ in todo]
    points = curves([([rr for _, rr in picked], metric) for picked, metric in picks]) if todo else []
    for (w, newest, earlier, (subs, runs)), pick, pts in zip(todo, picks, points, strict=True):
        rendered += 1
        curve, n_curves = convergence_chart(w, pick, pts)
        written.append(pages.render_page(job, w.page, "workload.html", w=w, history=history_charts(w),
                                         convergence=curve, n_curves=n_curves, max_curves=MAX_CURVES, month=newest,
                                         months=earlier, sub_rows=submission_rows(subs, "../"),
                                         run_rows=run_rows(runs, "../")))
    return written, digests, rendered

"""The study page (study/<n>-<name>.html, template study_page.html beside this file): a `trainbench study` report
given to `site build --study`, read only through its owner's typed reader (suite.studies.report.read_study), its
profile plot drawn by suite.studies.profile_plot from the numbers. A file that its reader refuses becomes an error
box on its page (or a SiteError under --strict).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from suite.results.record import slug
from suite.site.job import Job, Site, render_page
from suite.studies import profile_plot
from suite.studies.report import StudyReport, StudyReportError, read_study


@dataclass
class StudyView:
    """A study (`trainbench study`) on the site: its score table, per-workload times and profile plot."""

    name: str
    page: str
    source: str
    report: StudyReport | None = None
    workloads: list[dict[str, object]] = field(default_factory=list)  # {workload, cells: [(time, ratio)]}
    svg: str = ""  # drawn by suite.studies.profile_plot from the numbers, never copied from the input
    error: str = ""

    @property
    def scores(self) -> list[dict[str, object]]:
        return [{"algorithm": s.algorithm, "score": s.score, "reached": s.workloads_reached, "workloads": s.workloads}
                for s in (self.report.scores if self.report else [])]

    @property
    def algorithms(self) -> list[str]:
        return self.report.algorithms if self.report else []

    @property
    def tau_max(self) -> float:
        return self.report.tau_max if self.report else 0.0


def study_view(path: Path, index: int) -> StudyView:
    """study.json (or the folder holding it) -> a StudyView; a malformed file becomes an error on the page."""
    file = path / "study.json" if path.is_dir() else path
    view = StudyView(name=path.stem if path.is_file() else path.name, page=f"study/{index:02d}-{slug(path.stem)}.html",
                     source=str(file))
    try:
        report = read_study(path)
    except StudyReportError as e:
        view.error = str(e)
        return view
    view.name, view.report, view.svg = report.name, report, profile_plot.profile_svg(report)
    for w, per in report.times_s.items():
        view.workloads.append({"workload": w, "cells": [
            (f"{per[a]:.2f} s" if math.isfinite(per[a]) else "missed",
             f"{report.ratios[a][w]:.2f}" if math.isfinite(report.ratios[a][w]) else "inf") for a in report.algorithms]})
    return view


def render(job: Job, site: Site) -> list[str]:
    return [render_page(job, sv.page, "study_page.html", view=sv) for sv in site.studies]

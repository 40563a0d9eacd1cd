"""The compare page (compare/<n>-<name>.html, template compare.html beside this file): a `trainbench compare
--json-out` report given to `site build --compare`, read only through its owner's typed reader
(suite.compare.output): nothing here guesses at a JSON shape.

A file that its reader refuses becomes an error box on its page (or a SiteError under --strict).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from suite.compare import model as compare_model
from suite.compare import output as compare_output
from suite.results.record import slug
from suite.site.job import Job, Site, render_page

MAX_SIDE_FILE_BYTES = 64 * 1024 * 1024  # a compare report larger than this is refused, not parsed

# compare's verdicts -> a CSS class from a fixed set: the value itself never reaches the class attribute
VERDICT_CLASS = {compare_model.REGRESSED: "bad", compare_model.NOT_COMPARABLE: "warn", compare_model.IMPROVED: "good", compare_model.SAME: "ok"}


def verdict_class(value: object) -> str:
    return VERDICT_CLASS.get(value, "plain") if isinstance(value, str) else "plain"


def _num_text(x: float | None, unit: str = "") -> tuple[str, str]:
    if x is None or math.isnan(x):
        return "", ""
    return compare_output.fmt(x, unit) if unit else ("∞" if math.isinf(x) else f"{x:.4g}"), "num"


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[tuple[str, str]]]  # (text, css class) per cell; class "num" sorts numerically

    @property
    def numeric(self) -> list[bool]:
        """Columns whose every filled cell is a number sort numerically."""
        return [all(row[i][1] == "num" for row in self.rows if row[i][0]) and any(row[i][0] for row in self.rows)
                for i in range(len(self.columns))]


@dataclass
class CompareView:
    name: str
    page: str
    source: str
    summary: list[tuple[str, str, str]] = field(default_factory=list)  # (key, text, css class)
    tables: list[Table] = field(default_factory=list)
    texts: list[tuple[str, str]] = field(default_factory=list)  # the PR comment's Markdown, bad files
    error: str = ""


def test_text(report: compare_model.Report) -> str:
    """The test each comparison ran: Mann-Whitney on time-to-target seeds, the bootstrap interval on throughput A/B."""
    s = report.settings
    texts = []
    if any(p.mode == "tta" for p in report.pairs) or not report.pairs:
        texts.append(f"time to target: {s.test}, alpha {s.alpha}")
    if any(p.mode == "throughput" for p in report.pairs):
        texts.append(f"throughput A/B: ratio of median step times (candidate / baseline) with a {1 - s.alpha:.0%} "
                     f"two-level bootstrap interval (runs, then steps; {s.n_boot} resamples); regressed when the whole "
                     "interval lies beyond the noise floor")
    return "; ".join(texts)


def _ratio_cell(m: compare_model.MetricResult | None) -> tuple[str, str]:
    """The ratio with its interval where the test made one (throughput A/B)."""
    if m is None or m.ratio is None:
        return "", ""
    if m.ci_low is not None and m.ci_high is not None:
        return f"{m.ratio:.4g} [{m.ci_low:.4g}, {m.ci_high:.4g}]", "num"
    return _num_text(m.ratio)


def _why(p: compare_model.PairReport, s: compare_model.Settings) -> str:
    """The reason or cause; for a verdict without one, the gating metrics that moved, else the floor it stayed within."""
    if p.reason or p.cause:
        return p.reason or p.cause or ""
    moved = [m.label for m in p.metrics if m.gating and m.verdict in (compare_model.REGRESSED, compare_model.IMPROVED)]
    if moved:
        return f"{', '.join(moved)} beyond the noise floor ({p.noise_floor:.1%}, {p.noise_floor_source})"
    return f"within the noise floor ({p.noise_floor:.1%}, {p.noise_floor_source})"


def _pairs_table(report: compare_model.Report) -> Table:
    rows = []
    for p in report.pairs:
        # the figure the verdict is about: time to target for seeds, the median step time for a throughput A/B
        m = p.metric("time_to_target_s" if p.mode == "tta" else "time_per_step_s")
        base = m.baseline.center if m and m.baseline else None
        cand = m.candidate.center if m and m.candidate else None
        evidence = (_num_text(m.p_value if m else None) if p.mode == "tta" else
                    (f"{1 - report.settings.alpha:.0%} interval", "") if m and m.ci_low is not None else ("", ""))
        rows.append([
            (p.verdict, verdict_class(p.verdict)), (p.workload, ""), (p.backend, ""), (p.hardware, ""),
            ("time to target (s)" if p.mode == "tta" else "median step time (s), throughput runs", ""),
            _num_text(base), _num_text(cand), _ratio_cell(m), evidence, (_why(p, report.settings), ""),
        ])
    return Table("comparisons", ["verdict", "workload", "backend", "hardware", "figure", "baseline", "candidate",
                                 "ratio [interval]", "p (beyond floor) / interval", "cause / reason"], rows)


def _metrics_table(report: compare_model.Report) -> Table:
    rows = []
    for p in report.pairs:
        for m in p.metrics:
            rows.append([
                (p.workload, ""), (p.backend, ""), (p.hardware, ""), (m.label, ""),
                _num_text(m.baseline.center if m.baseline else None), _num_text(m.candidate.center if m.candidate else None),
                _ratio_cell(m), (f"{1 - report.settings.alpha:.0%} interval", "") if m.ci_low is not None
                else _num_text(m.p_value), (m.verdict, verdict_class(m.verdict)), (m.note, ""),
            ])
    return Table("every metric", ["workload", "backend", "hardware", "metric", "baseline", "candidate", "ratio [interval]",
                                  "p (beyond floor) / interval", "verdict", "note"], rows)


def compare_view(path: Path, index: int) -> CompareView:
    """A compare JSON report -> its page: the summary, one row per comparison, every metric, the PR comment."""
    view = CompareView(name=path.stem, page=f"compare/{index:02d}-{slug(path.stem)}.html", source=str(path))
    try:
        size = path.stat().st_size
        if size > MAX_SIDE_FILE_BYTES:
            raise compare_output.ReportError(f"{path}: {size} bytes is too large to render")
        report = compare_output.read_report(path)
    except (OSError, compare_output.ReportError) as e:
        view.error = str(e)
        return view
    regressed = any(p.verdict == compare_model.REGRESSED for p in report.pairs)
    overall = compare_model.REGRESSED if regressed else ("no regression" if report.exit_code == compare_model.EXIT_OK else "nothing comparable")
    view.summary.append(("verdict", overall, verdict_class(compare_model.REGRESSED) if regressed else
                         ("ok" if report.exit_code == compare_model.EXIT_OK else "warn")))
    view.summary += [(verdict, str(n), verdict_class(verdict) if n else "") for verdict, n in report.counts.items()]
    view.summary += [("exit code", str(report.exit_code), ""),
                     ("files", f"{report.baseline_files} baseline, {report.candidate_files} candidate, "
                               f"{len(report.errors)} bad", ""),
                     ("test", test_text(report), ""),
                     ("gating metrics", ", ".join(report.settings.gate), "")]
    if report.pairs:
        view.tables = [_pairs_table(report), _metrics_table(report)]
    if report.errors:
        view.texts.append(("bad files", "\n".join(report.errors)))
    view.texts.append(("PR comment (Markdown)", compare_output.to_markdown(report)))
    return view


def render(job: Job, site: Site) -> list[str]:
    return [render_page(job, v.page, "compare.html", view=v) for v in site.compares]

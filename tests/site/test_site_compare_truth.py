"""The compare page tells the truth (issue 49, point 4) about a throughput A/B: the test it names is the bootstrap
interval it ran (not Mann-Whitney), every column of the comparisons table is filled (the median step time, the ratio
with its interval), and the PR comment counts throughput runs as runs, not as "reached (100%)"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from benchmarks.sim.ab import simulate, write_sides
from suite.compare import model as compare_model
from suite.compare import output as compare_output
from suite.compare import tta as cmp
from suite.site.build import build_site


def _cells(html: str, table_id: str) -> list[list[str]]:
    body = html[html.index(f'id="{table_id}"'):]
    body = body[body.index("<tbody>"): body.index("</tbody>")]
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def test_a_throughput_ab_page_names_its_test_and_fills_every_column(tmp_path: Path) -> None:
    base, head = simulate(np.random.default_rng(3), rounds=6, steps=40, slowdown=1.5)
    base_dir, head_dir = write_sides(tmp_path / "ab", base, head)
    report = cmp.compare([base_dir], [head_dir])
    assert [p.mode for p in report.pairs] == ["throughput"] and report.pairs[0].verdict == compare_model.REGRESSED
    out_json = tmp_path / "ab.json"
    out_json.write_text(json.dumps(compare_output.to_json(report)))
    build_site(head_dir, tmp_path / "site", compare=[out_json])
    html = next((tmp_path / "site" / "compare").glob("*.html")).read_text()
    summary = html[html.index('id="compare-summary"'):html.index("</table>", html.index('id="compare-summary"'))]
    assert "bootstrap" in summary and "Mann-Whitney" not in summary
    (row,) = _cells(html, "compare-1")
    assert all(row), f"a blank column in the comparisons table: {row}"
    assert "median step time" in row[4] and re.fullmatch(r"1\.\d+ \[1\.\d+, 1\.\d+\]", row[7]), row
    every = _cells(html, "compare-2")
    step = next(r for r in every if "step" in r[3].lower())
    assert "[" in step[6], step
    comment = html[html.index("PR comment"):]
    assert "throughput run(s)" in comment and "reached (" not in comment


def _tick_texts(svg: str, anchor: str) -> list[str]:
    return re.findall(rf'<text x="[^"]*" y="[^"]*" text-anchor="{anchor}">([^<]*)</text>', svg)


def test_ticks_of_a_narrow_axis_differ() -> None:
    """A bits-per-token curve between 9.026 and 9.034 once had every y tick labelled "9.03"."""
    from suite.site.charts import Point, Series, line_chart

    pts = [Point(step, 9.034 - step * 0.001) for step in range(9)]
    svg = str(line_chart([Series("seed 0", pts)], x_label="step", y_label="bits per token"))
    ys = _tick_texts(svg, "end")
    assert len(ys) >= 3 and len(set(ys)) == len(ys), ys


def test_a_history_of_one_submission_spans_hours_not_a_second() -> None:
    from suite.site.charts import Point, Series, line_chart

    svg = str(line_chart([Series("h200", [Point(1_793_000_000.0, 12.0)])], x_label="date", y_label="TTA (s)",
                         x_kind="time"))
    xs = _tick_texts(svg, "middle")
    assert len(xs) >= 3 and len(set(xs)) == len(xs), xs
    assert not any(re.fullmatch(r"\d\d:\d\d:\d\d", x) for x in xs), xs  # seconds apart: a one-second axis


def test_the_compare_page_in_chromium(tmp_path: Path, browser) -> None:
    """The page as a reader sees it (headless Chromium): no console error, every cell of the comparisons table
    filled, the bootstrap test named; a screenshot is left at /tmp/h49_compare.png."""
    base, head = simulate(np.random.default_rng(3), rounds=6, steps=40, slowdown=1.5)
    base_dir, head_dir = write_sides(tmp_path / "ab", base, head)
    out_json = tmp_path / "ab.json"
    out_json.write_text(json.dumps(compare_output.to_json(cmp.compare([base_dir], [head_dir]))))
    build_site(head_dir, tmp_path / "site", compare=[out_json])
    page_file = next((tmp_path / "site" / "compare").glob("*.html"))
    ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_file.resolve().as_uri())
    page.wait_for_load_state("load")
    cells = page.locator("#compare-1 tbody tr td").all_inner_texts()
    summary = page.locator("#compare-summary").inner_text()
    page.screenshot(path="/tmp/h49_compare.png", full_page=True)
    ctx.close()
    assert not errors, errors
    assert cells and all(c.strip() for c in cells), cells
    assert "bootstrap" in summary and "Mann-Whitney" not in summary

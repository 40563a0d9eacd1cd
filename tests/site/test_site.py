"""The static site build without a browser: aggregation, determinism, bad input, escaping at the source level."""

from __future__ import annotations

import json
import math
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.site_factory import (
    EXPECTED_ORDER,
    EXPECTED_TTA,
    NEW_SHA,
    OLD_SHA,
    XSS,
    write_compare_report,
    write_hostile,
    write_standard,
)

from benchmarks.sim.results import T0, site_result
from suite.compare import output as compare_output
from suite.results.baseline_schema import Baseline, Provenance
from suite.results.baselines import aggregate_figures
from suite.results.record import ResultError, write_result
from suite.results.stats import RunFigures
from suite.site import charts as site_charts
from suite.site.build import SiteError, build_site
from suite.site.pages.compare import compare_view, verdict_class
from suite.site.render import fmt_s


@pytest.fixture()
def standard(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    write_standard(root)
    return root


def _rows(html: str, table_id_prefix: str = "lb-1-") -> list[str]:
    start = html.index(f'id="{table_id_prefix}')
    body = html[start: html.index("</table>", start)]
    return re.findall(r'<tr data-hw="([^"]*)" data-backend="([^"]*)">', body)


def test_index_ranks_latest_submissions_by_olympic_mean(standard: Path, tmp_path: Path) -> None:
    report = build_site(standard, tmp_path / "out")
    html = (tmp_path / "out" / "index.html").read_text()
    assert report.results == 5 + 5 + 5 + 3 + 5 + 3 + 3
    assert [tuple(r) for r in _rows(html)] == EXPECTED_ORDER
    section = html[html.index('data-workload="cv/digits_cnn"'):]
    tta_cells = re.findall(r'<td class="num strong" data-sort="([^"]*)"', section)[: len(EXPECTED_TTA)]
    assert [float(x) for x in tta_cells] == EXPECTED_TTA
    # the older, faster h200/torch submission is history, not the current leaderboard
    assert OLD_SHA[:10] not in section.split("</table>")[0]
    assert NEW_SHA[:10] in section
    assert "3/5" in section and "∞" in section  # megatron: 3 of 5 reached, TTA infinite (not missing)


def test_workload_page_keeps_history_and_both_submissions(standard: Path, tmp_path: Path) -> None:
    build_site(standard, tmp_path / "out")
    pages = list((tmp_path / "out" / "w").glob("cv-digits_cnn-*.html"))
    assert len(pages) == 1
    html = pages[0].read_text()
    assert OLD_SHA[:10] in html and NEW_SHA[:10] in html
    svg = html[html.index('id="chart-tta-history"'):]
    svg = svg[: svg.index("</svg>")]
    # one point per submission: 5 current + 1 old; megatron's is drawn in the "not reached" band
    assert svg.count('class="pt"') + svg.count('class="pt inf"') == 6
    assert svg.count('class="pt inf"') == 1
    assert "not reached" in svg


def test_build_is_a_pure_function_of_its_inputs(standard: Path, tmp_path: Path) -> None:
    build_site(standard, tmp_path / "a", jobs=1)
    build_site(standard, tmp_path / "b", jobs=2)
    files_a = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert files_a == files_b
    for rel in files_a:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel


def test_rebuild_prunes_pages_of_removed_results_and_keeps_unchanged_ones(standard: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    build_site(standard, out)
    runs = sorted((out / "r").glob("*.html"))
    keep = runs[0]
    mtime = keep.stat().st_mtime_ns
    victim = sorted(standard.rglob("*.json"))[-1]
    victim.unlink()
    report = build_site(standard, out)
    after = sorted((out / "r").glob("*.html"))
    assert len(after) == len(runs) - 1 == report.results
    assert len(list((out / "r").glob("*.json"))) == report.results
    assert keep.stat().st_mtime_ns == mtime  # an unchanged page is not rewritten


def test_corrupt_results_are_named_and_skipped_or_fail_under_strict(standard: Path, tmp_path: Path) -> None:
    bad = standard / "nvidia-h200-x8" / "cv" / "digits_cnn" / "torch"
    (bad / "truncated.json").write_text('{"schema_version": 1, "run_id": "abc", "sta')
    (bad / "list.json").write_text("[1, 2, 3]")
    (bad / "wrong-type.json").write_text(json.dumps({"schema_version": 1, "run_id": 5}))
    newer = json.loads(next(standard.rglob("*.json")).read_text())
    newer["schema_version"] = 99
    (bad / "future.json").write_text(json.dumps(newer))
    (bad / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    report = build_site(standard, tmp_path / "out")
    assert len(report.skipped) == 5
    joined = "\n".join(report.skipped)
    for name in ("truncated.json", "list.json", "wrong-type.json", "future.json", "binary.json"):
        assert name in joined
    assert str(standard.resolve()) not in joined  # named relative to the results folder: no build paths leak
    html = (tmp_path / "out" / "index.html").read_text()
    assert "5 input file(s) skipped" in html and "truncated.json" in html and "schema_version 99" in html
    assert [tuple(r) for r in _rows(html)] == EXPECTED_ORDER  # the good results still rank
    with pytest.raises(ResultError, match=r"\.json"):
        build_site(standard, tmp_path / "strict", strict=True)
    assert not (tmp_path / "strict" / "index.html").exists()


def test_refuses_to_write_into_a_folder_it_did_not_build(standard: Path, tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("do not delete")
    with pytest.raises(SiteError, match="not built by"):
        build_site(standard, precious)
    assert (precious / "thesis.tex").read_text() == "do not delete"
    with pytest.raises(SiteError, match="no such folder"):
        build_site(tmp_path / "missing", tmp_path / "out")


def test_mllog_is_copied_only_from_beside_the_result(tmp_path: Path) -> None:
    root = tmp_path / "results"
    (tmp_path / "secret.txt").write_text("outside the results folder")
    good = site_result(seed=0, mllog="run.mllog")
    p = write_result(root, good)
    (p.parent / "run.mllog").write_text(':::MLLOG {"key": "run_start"}\n')
    write_result(root, site_result(seed=1, mllog="../../../../../secret.txt"))
    link = p.parent / "link.mllog"
    link.symlink_to(tmp_path / "secret.txt")
    write_result(root, site_result(seed=2, mllog="link.mllog"))
    write_result(root, site_result(seed=3, mllog="missing.mllog"))
    out = tmp_path / "out"
    build_site(root, out)
    logs = list((out / "r").glob("*.mllog.txt"))
    assert len(logs) == 1 and logs[0].read_text().startswith(":::MLLOG")
    for page in (out / "r").glob("*.html"):
        html = page.read_text()
        if 'id="mllog"' in html:
            assert logs[0].name in html
    assert not any("outside the results folder" in f.read_text(errors="replace")
                   for f in out.rglob("*") if f.is_file())


class _Tags(HTMLParser):
    """What a browser's tokenizer would see: tags and attribute names, after entity decoding of values."""

    FOREIGN = {"img", "iframe", "object", "embed", "base", "form", "input", "textarea", "style", "link"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.handlers: list[tuple[str, str]] = []
        self.bad_links: list[str] = []
        self.scripts: list[str] = []
        self.foreign: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.handlers += [(tag, k) for k in a if k.startswith("on")]
        if tag == "script":
            self.scripts.append((a.get("src") or "INLINE").removeprefix("../"))
        if tag == "link" and (a.get("href") or "").removeprefix("../") in ("static/site.css", "static/favicon.svg"):
            return
        if tag == "meta" and (a.get("http-equiv") or "").lower() == "refresh":
            self.foreign.append("meta refresh")
        if tag in self.FOREIGN:
            self.foreign.append(tag)
        for k in ("href", "src", "action", "formaction", "xlink:href"):
            v = (a.get(k) or "").strip()
            if k in a and (":" in v.split("/")[0] or v.startswith("//")):
                self.bad_links.append(v)


def test_hostile_strings_are_escaped_in_every_page(tmp_path: Path) -> None:
    write_hostile(tmp_path / "results")
    out = tmp_path / "out"
    build_site(tmp_path / "results", out)
    pages = list(out.rglob("*.html"))
    assert len(pages) > len(XSS)
    for page in pages:
        html = page.read_text()
        tags = _Tags()
        tags.feed(html)
        assert not tags.handlers, (page, tags.handlers[:3])  # no event-handler attribute anywhere
        assert not tags.bad_links, (page, tags.bad_links[:3])  # every link is relative, built by the site
        assert tags.scripts == ["static/site.js"], page  # exactly one script: ours
        assert not tags.foreign, (page, tags.foreign[:3])  # no img/iframe/object/embed/base/form/meta-refresh
        assert "<script>window" not in html and "<img" not in html and "<svg onload" not in html
    index = (out / "index.html").read_text()
    assert "&lt;script&gt;window.__pwned=1" in index  # the payload is shown, as text
    assert "{{ 7*7 }}" in index  # template syntax in a result is not evaluated


def test_compare_page_renders_rows_and_verdicts_and_refuses_what_is_not_a_report(standard: Path, tmp_path: Path) -> None:
    good = write_compare_report(tmp_path)
    data = json.loads(good.read_text())
    data["pairs"][0]["workload"] = XSS[1]  # a hostile name, as a result file could carry
    data["pairs"][0]["reason"] = XSS[0]
    good.write_text(json.dumps(data))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    other = tmp_path / "other.json"  # valid JSON of another shape: refused by compare's reader, not guessed at
    other.write_text(json.dumps({"verdict": "regression", "rows": [{"verdict": "improvement"}]}))
    out = tmp_path / "out"
    build_site(standard, out, compare=[good, garbage, other])
    pages = sorted((out / "compare").glob("*.html"))
    assert len(pages) == 3
    html = pages[0].read_text()
    assert '<span class="verdict v-bad">regressed</span>' in html  # the summary and the regressed row
    assert '<span class="verdict v-good">improved</span>' in html
    assert '<span class="verdict v-ok">no significant change</span>' in html
    assert "TrainBench compare" in html  # the PR comment, as compare writes it
    assert "<img" not in html and "&lt;img" in html
    assert "could not be read" in pages[1].read_text()
    assert "not a compare report" in pages[2].read_text()
    index = (out / "index.html").read_text()
    assert all(f'href="{p.relative_to(out).as_posix()}"' in index for p in pages)
    with pytest.raises(SiteError, match="garbage.json"):
        build_site(standard, tmp_path / "strict", compare=[garbage], strict=True)


def test_compare_view_shows_what_compare_computed(tmp_path: Path) -> None:
    path = write_compare_report(tmp_path)
    report = compare_output.read_report(path)
    view = compare_view(path, 0)
    assert not view.error
    pairs = view.tables[0]
    assert [row[0] for row in pairs.rows] == [(p.verdict, verdict_class(p.verdict)) for p in report.pairs]
    regressed = report.pairs[0].metric("time_to_target_s")
    assert regressed and pairs.rows[0][pairs.columns.index("ratio [interval]")] == (f"{regressed.ratio:.4g}", "num")
    assert sum(len(p.metrics) for p in report.pairs) == len(view.tables[1].rows)
    assert verdict_class('x" onclick="y') == "plain" and verdict_class("regression") == "plain"  # only compare's


def test_baseline_delta_on_the_leaderboard(standard: Path, tmp_path: Path) -> None:
    base = tmp_path / "baselines" / "nvidia-h200-x8" / "cv" / "digits_cnn"
    base.mkdir(parents=True)
    runs = [RunFigures(run_id=f"b{i}", seed=i, status="reached", time_to_target_s=t) for i, t in enumerate((9.0, 10.0, 11.0))]
    b = Baseline(hardware="nvidia-h200-x8", workload="cv/digits_cnn", workload_version=1, backend="torch",
                 spec_hash="x", noise_floor=None, aggregate=aggregate_figures(runs), runs=runs,
                 provenance=Provenance(run_ids=["b0", "b1", "b2"], result_files=[], result_git_shas=[],
                                       result_git_dirty=False, promoted_at="2026-12-03T00:00:00+00:00"))
    (base / "torch.json").write_text(b.model_dump_json())  # olympic mean 10.0 s
    (tmp_path / "baselines" / "broken.json").write_text("nope")
    (tmp_path / "baselines" / "not-a-baseline.json").write_text(json.dumps({"aggregate": {"tta_olympic_s": 10.0}}))
    report = build_site(standard, tmp_path / "out", baselines=tmp_path / "baselines")
    html = (tmp_path / "out" / "index.html").read_text()
    assert "+20.0%" in html  # 12.0 s against a 10.0 s baseline
    assert any("broken.json" in s for s in report.skipped)
    assert any("not-a-baseline.json" in s and "not a baseline file" in s for s in report.skipped)


def test_empty_results_folder_builds_a_page_that_says_so(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    report = build_site(tmp_path / "results", tmp_path / "out")
    assert report.results == 0 and "No results yet" in report.index.read_text()


def test_chart_helpers() -> None:
    assert site_charts.linear_ticks(0, 1) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert site_charts.log_ticks(1, 1000) == [1.0, 10.0, 100.0, 1000.0]  # 1-2-5 would be 10 ticks: decades only
    assert site_charts.log_ticks(1, 100) == [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
    assert site_charts.fmt_num(1394.2) == "1,394" and site_charts.fmt_num(33473.0) == "33.5k"
    assert site_charts.fmt_num(9.89e14) == "989T" and site_charts.fmt_num(math.inf) == "∞"
    assert fmt_s(0.5103) == "0.510" and fmt_s(math.inf) == "∞" and fmt_s(None) == "—"
    ticks, fmt = site_charts.time_ticks(T0.timestamp(), T0.timestamp() + 6 * 86400)
    assert len(ticks) <= 7 and fmt == "%Y-%m-%d"
    svg = site_charts.line_chart([site_charts.Series("a<b", [site_charts.Point(1, 2, "x<y")])], x_label="<x>",
                                 y_label="y")
    assert "<b" not in svg.replace("<b>", "") and "a&lt;b" in svg and "&lt;x&gt;" in svg


def test_site_scale_benchmark_small(tmp_path: Path) -> None:
    """benchmarks/site_scale.py runs end to end (at 300 results here; the 10,000 figure is in docs/site.md)."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(repo / "benchmarks" / "site_scale.py"), "--results", "300",
                           "--keep", str(tmp_path / "scale")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(repo)})
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["results"] == 300 and figures["index_bytes"] < 1_000_000, proc.stderr


def test_rebuild_rerenders_a_page_when_its_log_appears_or_the_site_code_changes(tmp_path: Path, monkeypatch) -> None:
    import suite.site.build as site_mod

    root, out = tmp_path / "results", tmp_path / "out"
    p = write_result(root, site_result(seed=0, mllog="run.mllog"))
    write_result(root, site_result(seed=1))
    build_site(root, out)
    page = next(f for f in (out / "r").glob("*.html") if "run.mllog" in f.read_text())
    assert 'id="mllog"' not in page.read_text() and "not beside it" in page.read_text()
    (p.parent / "run.mllog").write_text(':::MLLOG {"key": "run_stop"}\n')
    build_site(root, out)
    assert 'id="mllog"' in page.read_text()
    other = next(f for f in (out / "r").glob("*.html") if f != page)
    other.write_text("stale")  # a hand-edited page survives only while nothing that shapes it changes
    build_site(root, out)
    assert other.read_text() == "stale"
    monkeypatch.setattr(site_mod, "code_version", lambda: "a different site version")
    build_site(root, out)
    assert other.read_text().startswith("<!doctype html>")


def test_leaderboards_of_an_algorithm_study_name_the_algorithm(tmp_path: Path) -> None:
    """`--algo` runs differ in spec hash; each board says which algorithm made it."""
    for label, tta in (("muon", 5.0), ("adamw", 7.0)):
        for seed in range(3):
            r = site_result(seed=seed, tta_s=tta + seed / 10)
            r.spec_hash = f"{label:x<16}"[:16]
            r.config = {**r.config, "algorithm": {"label": label}}
            write_result(tmp_path / "results", r)
    build_site(tmp_path / "results", tmp_path / "out")
    index = (tmp_path / "out" / "index.html").read_text()
    assert re.search(r"spec muonx+ · algorithm muon", index) and re.search(r"spec adamwx+ · algorithm adamw", index)

"""The built site in a real headless Chromium (Playwright, Debian /usr/bin/chromium), opened from file://.

Installed by scripts/install_browser.sh, which `make test` runs. Checks: no console errors on any kind of
page, the leaderboard order, sorting and filters, chart point counts, hostile result strings inert (no
dialog, no injected element, no script run), and a screenshot of the index saved under _artifacts/.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.site_factory import EXPECTED_ORDER, XSS, write_compare_report, write_hostile, write_standard

from suite.site.build import build_site

ARTIFACTS = Path(__file__).resolve().parents[2] / "_artifacts"



class Page:
    """A browser tab that records console messages, page errors and dialogs (and dismisses dialogs)."""

    def __init__(self, browser) -> None:
        self.context = browser.new_context(viewport={"width": 1440, "height": 900})
        self.page = self.context.new_page()
        self.console: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))

    def open(self, path: Path, fragment: str = "") -> None:
        self.page.goto(path.resolve().as_uri() + fragment)
        self.page.wait_for_load_state("load")

    def close(self) -> None:
        self.context.close()


@pytest.fixture()
def tab(browser) -> Iterator[Page]:
    t = Page(browser)
    yield t
    t.close()


@pytest.fixture(scope="module")
def standard_site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("site")
    write_standard(tmp / "results")
    compare = write_compare_report(tmp / "compare", {"nvidia-h200-x8": 0.012, "nvidia-a100-x8": 0.01, "cpu-amd-epyc-2c": 0.008})
    build_site(tmp / "results", tmp / "out", compare=[compare])
    return tmp / "out"


def _board(tab: Page) -> list[tuple[str, str]]:
    rows = tab.page.locator('section[data-workload="cv/digits_cnn"] table.lb tbody tr:not([hidden])')
    return [(r.get_attribute("data-hw"), r.get_attribute("data-backend")) for r in rows.all()]


def test_every_kind_of_page_loads_without_console_errors(tab: Page, standard_site: Path) -> None:
    pages = [standard_site / "index.html", *sorted((standard_site / "w").glob("*.html")),
             *sorted((standard_site / "r").glob("*.html"))[:5], *sorted((standard_site / "compare").glob("*.html"))]
    assert len(pages) >= 9
    for p in pages:
        tab.open(p)
        assert tab.page.locator("h1").count() == 1, p
    assert tab.console == [] and tab.dialogs == []
    # the sort buttons exist only because site.js ran under the page's Content-Security-Policy
    tab.open(standard_site / "index.html")
    assert tab.page.locator("th button.sort").count() > 10
    assert tab.page.locator("#filters").is_visible()


def test_leaderboard_order_and_screenshot(tab: Page, standard_site: Path) -> None:
    tab.open(standard_site / "index.html")
    assert _board(tab) == EXPECTED_ORDER
    first = tab.page.locator('section[data-workload="cv/digits_cnn"] table.lb tbody tr').first
    assert "9.50" in first.inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    tab.page.screenshot(path=str(ARTIFACTS / "site-index.png"), full_page=True)
    workload = sorted((standard_site / "w").glob("cv-*.html"))[0]
    tab.open(workload)
    tab.page.screenshot(path=str(ARTIFACTS / "site-workload.png"), full_page=True)
    tab.open(sorted((standard_site / "r").glob("*.html"))[0])
    tab.page.screenshot(path=str(ARTIFACTS / "site-run.png"), full_page=True)
    assert (ARTIFACTS / "site-index.png").stat().st_size > 10_000
    assert tab.console == []


def test_sorting_by_columns(tab: Page, standard_site: Path) -> None:
    tab.open(standard_site / "index.html")
    table = tab.page.locator('section[data-workload="cv/digits_cnn"] table.lb')
    header = table.locator("th", has_text="TTA (s)")
    header.locator("button").click()
    assert header.get_attribute("aria-sort") == "ascending"
    assert _board(tab) == EXPECTED_ORDER  # infinite TTA sorts after every number
    header.locator("button").click()
    assert header.get_attribute("aria-sort") == "descending"
    assert _board(tab) == EXPECTED_ORDER[::-1]
    # numeric, not lexicographic: samples/s spans 1,000s and 100s
    sps = table.locator("th", has_text="samples/s")
    sps.locator("button").click()
    col = [c.get_attribute("data-sort") for c in table.locator("tbody tr td:nth-child(10)").all()]
    values = [float(v) for v in col]
    assert values == sorted(values) and len(set(values)) > 2
    table.locator("th", has_text="hardware").locator("button").click()
    hws = [h for h, _ in _board(tab)]
    assert hws == sorted(hws)


def test_filters_by_hardware_and_backend(tab: Page, standard_site: Path) -> None:
    tab.open(standard_site / "index.html")
    tab.page.select_option("#f-hw", "nvidia-a100-x8")
    assert _board(tab) == [("nvidia-a100-x8", "torch"), ("nvidia-a100-x8", "megatron")]
    nlp = tab.page.locator('section[data-workload="nlp/char_gru"]')
    assert nlp.locator(".nomatch").is_visible()  # its only row is on h200
    tab.page.select_option("#f-backend", "megatron")
    assert _board(tab) == [("nvidia-a100-x8", "megatron")]
    assert "1 of 6 rows" in tab.page.locator("#f-count").inner_text()
    # the filter lives in the URL fragment: a reload (or a shared link) shows the same view
    url = tab.page.url
    assert "hw=nvidia-a100-x8" in url and "backend=megatron" in url
    tab.page.goto(url)
    tab.page.reload()
    assert _board(tab) == [("nvidia-a100-x8", "megatron")]
    tab.page.select_option("#f-hw", "")
    tab.page.select_option("#f-backend", "")
    assert _board(tab) == EXPECTED_ORDER and not nlp.locator(".nomatch").is_visible()


def test_charts_have_one_point_per_datum(tab: Page, standard_site: Path) -> None:
    workload = sorted((standard_site / "w").glob("cv-*.html"))[0]
    tab.open(workload)
    history = tab.page.locator("#chart-tta-history")
    assert history.locator(".pt").count() == 6  # 5 current submissions + 1 older one
    assert history.locator(".pt.inf").count() == 1
    assert history.locator(".legend text").count() == 5  # hardware x backend x precision series
    conv = tab.page.locator("#chart-convergence")
    # newest submission of each series: 5 + 5 + 5 + 3 + 5 seeds, 6 evaluations each; 24 curves shared by
    # 5 configurations is 4 seeds each (the CPU has 3)
    assert conv.locator("circle.pt").count() == (4 + 4 + 4 + 3 + 4) * 6
    assert conv.locator(".legend text").count() == 5 + 1  # configurations + the target line
    assert conv.locator(".ref line").count() == 1 and "target accuracy 0.97" in conv.text_content()
    # a run page: one point per evaluation in the target-metric chart (9 evals on nlp/char_gru)
    nlp = sorted((standard_site / "w").glob("nlp-*.html"))[0]
    tab.open(nlp)
    tab.page.locator("#runs a").first.click()
    tab.page.wait_for_load_state("load")
    first_chart = tab.page.locator("svg.chart").first
    assert first_chart.locator("circle.pt").count() == 9
    assert "eval accuracy" in first_chart.text_content()
    assert tab.console == []


def test_pages_are_usable_without_javascript(browser, standard_site: Path) -> None:
    ctx = browser.new_context(java_script_enabled=False)
    page = ctx.new_page()
    page.goto((standard_site / "index.html").resolve().as_uri())
    rows = page.locator('section[data-workload="cv/digits_cnn"] table.lb tbody tr')
    assert [(r.get_attribute("data-hw"), r.get_attribute("data-backend")) for r in rows.all()] == EXPECTED_ORDER
    assert not page.locator("#filters").is_visible()  # no dead controls without JS
    page.locator('a[href^="w/cv-"]').first.click()
    assert page.locator("#chart-tta-history .pt").count() == 6
    ctx.close()


def test_hostile_result_strings_are_inert_in_the_browser(tab: Page, tmp_path: Path) -> None:
    write_hostile(tmp_path / "results")
    compare = write_compare_report(tmp_path / "compare", {f"hw-{i}": 0.01 for i in range(len(XSS))})
    data = json.loads(compare.read_text())
    for pair, payload in zip(data["pairs"], XSS, strict=True):  # hostile strings wherever a report has text
        pair["workload"], pair["reason"], pair["metrics"][0]["note"] = payload, payload, payload
    data["errors"] = list(XSS)
    compare.write_text(json.dumps(data))
    out = tmp_path / "out"
    build_site(tmp_path / "results", out, compare=[compare])
    pages = sorted(out.rglob("*.html"))
    # a run page per payload, the index, the hardware page (every hostile hardware name on it), the compare page,
    # and 5 workload pages (4 hostile names + digits)
    assert len(list((out / "r").glob("*.html"))) == len(XSS) and len(pages) == len(XSS) + 8
    for p in pages:
        tab.open(p)
        tab.page.mouse.move(200, 300)  # give onmouseover-style payloads their chance
        tab.page.mouse.move(700, 500)
        state = tab.page.evaluate("""() => ({
            pwned: window.__pwned === undefined ? null : window.__pwned,
            handlers: [...document.querySelectorAll('*')].flatMap(e => [...e.attributes]
                .filter(a => a.name.startsWith('on')).map(a => e.tagName + ' ' + a.name)),
            scripts: [...document.scripts].map(s => s.getAttribute('src')),
            foreign: [...document.querySelectorAll('img,iframe,object,embed,base,form,input,textarea,style')]
                .map(e => e.tagName),
            links: [...document.querySelectorAll('[href]')].map(e => e.getAttribute('href'))
                .filter(h => /^\\s*[a-z][a-z0-9+.-]*:/i.test(h) || h.startsWith('//')),
        })""")
        assert state["pwned"] is None, p
        assert state["handlers"] == [], (p, state["handlers"])
        assert [s.removeprefix("../") for s in state["scripts"]] == ["static/site.js"], p
        assert state["foreign"] == [] and state["links"] == [], (p, state)
    assert tab.dialogs == []
    assert tab.console == []  # not even a CSP violation: nothing tried to run
    tab.open(out / "index.html")
    text = tab.page.locator("main").inner_text()
    assert '<script>window.__pwned=1;alert("xss-script")</script>' in text  # shown as text, verbatim
    assert "{{ 7*7 }}" in text


@pytest.mark.skipif(shutil.which("true") is None, reason="needs a POSIX userland")
def test_served_over_loopback_http(tab: Page, standard_site: Path, tmp_path: Path) -> None:
    """`trainbench site serve` on 127.0.0.1: the same pages, over real HTTP, without console errors."""
    import re
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "suite.cli", "site", "serve", "--out", str(standard_site),
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(repo), "COLUMNS": "200"})
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        m = re.search(r"http://(127\.0\.0\.1):(\d+)/", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        base = m.group(0)
        tab.page.goto(base)
        assert _board(tab) == EXPECTED_ORDER
        tab.page.locator('a[href^="w/cv-"]').first.click()
        tab.page.wait_for_load_state("load")
        assert tab.page.locator("#chart-tta-history .pt").count() == 6
        assert tab.console == []
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_compare_page_lists_verdicts_and_sorts_numbers_as_numbers(tab: Page, standard_site: Path) -> None:
    tab.open(sorted((standard_site / "compare").glob("*.html"))[0])
    table = tab.page.locator("table.compare").first
    assert table.locator("tbody tr").count() == 3
    assert [v.inner_text() for v in table.locator(".verdict").all()] == \
        ["regressed", "improved", "no significant change"]  # compare's own order: by severity
    head = "candidate"  # the figure column says what it is: time to target (s) for these seeds
    table.locator("th", has_text=head).locator("button").click()
    index = [h.inner_text() for h in table.locator("thead th").all()].index(table.locator("th", has_text=head).inner_text())
    cells = [r.locator("td").nth(index).inner_text() for r in table.locator("tbody tr").all()]
    assert len(cells) == 3 and [float(c) for c in cells] == sorted(float(c) for c in cells)
    assert sorted(cells) != cells  # ~8.5, ~10.5, ~12.5: lexicographic order would differ
    assert tab.console == []


def test_an_earlier_month_has_its_own_page_that_works_with_and_without_javascript(browser, tab: Page,
                                                                                 tmp_path: Path) -> None:
    from datetime import timedelta

    from support.site_factory import WL

    from benchmarks.sim.results import T0, site_result
    from suite.results.record import load_results, write_result
    from suite.site.data import month_page, workload_page

    res, out = tmp_path / "results", tmp_path / "out"
    write_standard(res)  # November 2026
    write_result(res, site_result(WL, "nvidia-h200-x8", "torch", seed=0, started_at=T0 + timedelta(days=32)))
    build_site(res, out)
    nov, wl = out / month_page(WL, "2026-11"), out / workload_page(WL)
    # with JS, under the CSP: no console errors, and the month's tables got their sort buttons
    tab.open(nov)
    assert tab.page.locator("h1").count() == 1 and tab.console == [] and tab.dialogs == []
    assert tab.page.locator("#runs th button.sort").count() > 5
    n_nov = tab.page.locator("#runs tbody tr").count()
    runs = [r for _, r in load_results(res).results if r.workload == WL]
    assert n_nov == len(runs) - 1 > 20  # every November run of the workload (the standard fixture's), not December's
    started = tab.page.locator("#runs th", has_text="started (UTC)")
    started.locator("button").click()
    dates = [c.get_attribute("data-sort") for c in tab.page.locator("#runs tbody tr td:nth-child(1)").all()]
    assert dates == sorted(dates, key=float, reverse=started.get_attribute("aria-sort") == "descending")
    # without JS: the workload page lists December's one run and links November's page, which lists the rest
    ctx = browser.new_context(java_script_enabled=False)
    page = ctx.new_page()
    page.goto(wl.resolve().as_uri())
    assert page.locator("#runs tbody tr").count() == 1
    page.locator("#months a", has_text="2026-11").click()
    assert page.url.endswith(nov.name) and page.locator("#runs tbody tr").count() == n_nov
    page.locator(".crumbs a", has_text=WL).click()
    assert page.url.endswith(wl.name)
    ctx.close()


def test_the_convergence_chart_by_samples_shows_the_rcp_band(tab: Page, tmp_path: Path) -> None:
    """A workload with an RCP beside its baselines: its page draws the curves of the RCP's spec by samples with the
    reference band (mean +- sd) and the significantly-faster line; the page without one draws no such chart."""
    from benchmarks.sim.results import site_result
    from suite.results.baseline_schema import Baseline, BaselineAggregate, Provenance
    from suite.results.rcp import build_rcp, write_rcp
    from suite.results.record import write_result
    from suite.results.stats import RunFigures

    for seed in range(4):
        write_result(tmp_path / "results", site_result(seed=seed, tta_s=10.0 + seed, evals=6))
    runs = [RunFigures(run_id=f"r{i}", seed=i, status="reached", time_to_target_s=10.0, steps_to_target=s)
            for i, s in enumerate([500, 520, 480, 510, 530, 490, 505, 515])]
    from suite.results import stats

    bl = Baseline(hardware="nvidia-h200-x8", workload="cv/digits_cnn", workload_version=1, backend="torch",
                  spec_hash="55c3975e2cfc18aa", noise_floor=None, aggregate=BaselineAggregate.of(stats.aggregate(runs)),
                  runs=runs, provenance=Provenance(run_ids=[], result_files=[], result_git_shas=[],
                                                   result_git_dirty=False, promoted_at="2026-12-01T00:00:00+00:00"))
    write_rcp(tmp_path / "baselines", build_rcp(bl, "baselines/x.json", 64))
    build_site(tmp_path / "results", tmp_path / "out", baselines=tmp_path / "baselines")
    tab.open(next((tmp_path / "out" / "w").glob("cv-*.html")))
    chart = tab.page.locator("#chart-convergence-rcp")
    assert chart.count() == 1
    assert chart.locator(".rcp-band rect").count() == 1 and "RCP 32.4k ± 970 samples (8 seeds, batch 64)" in chart.locator(".rcp-band text").text_content()
    assert chart.locator(".change-point").count() == 1
    assert chart.locator("circle.pt").count() == 4 * 6  # every seed's evaluations, by samples
    box = chart.locator(".rcp-band rect").bounding_box()
    assert box is not None and box["width"] > 5 and box["height"] > 50
    # the seeds reached the target in 120 steps (7,680 samples), far below the reference: flagged on the
    # leaderboard, the time to target normalized as MLPerf does (x reference mean / their mean), the raw beside it
    cell = tab.page.locator("table.lb td.rcp-faster").first
    assert "converged faster than the reference" in cell.text_content() and "raw 11.5" in cell.text_content()
    factor = 32426.67 / 7680  # the RCP's olympic mean of samples / the seeds' (every seed 120 steps x 64)
    assert float(cell.get_attribute("data-sort")) == pytest.approx(11.5 * factor, rel=0.01)
    assert tab.console == []

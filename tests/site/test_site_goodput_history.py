"""Issue 48: the workload page charts each submission's wall-clock account over the history (one stacked bar per
submission, each part the mean over its seeds), and a fault scenario's leaderboard names the fault, the seeds that
recovered and the time the failure cost; read in a real headless Chromium, through the index and the file walk."""

from __future__ import annotations

import math
import os
import statistics
from datetime import timedelta
from pathlib import Path

import pytest

from benchmarks.sim.results import T0, site_result
from suite.results.account import Goodput
from suite.results.record import write_result
from suite.site.build import build_site
from suite.site.data import workload_page

SCREENSHOT = Path(os.environ.get("TRAINBENCH_GOODPUT_HISTORY_SCREENSHOT", "/tmp/h48_goodput_history.png"))
WL, FAULTY = "cv/digits_cnn", "cv/digits_cnn_node_failure"
DAY = timedelta(days=1)


def _account(compile_s: float, steps_s: float, lost_s: float = 0.0, recovery_s: float = 0.0,
             restore_s: float = 0.0, recovery: dict | None = None) -> Goodput:
    parts = {"startup_s": 1.0, "init_s": 2.0, "checkpoint_restore_s": restore_s, "compile_s": compile_s,
             "steps_s": steps_s, "data_wait_s": 0.5, "eval_s": 1.5, "checkpoint_save_s": 0.0, "lost_s": lost_s,
             "recovery_s": recovery_s, "other_s": 0.0, "teardown_s": 0.25}
    wall = math.fsum(parts.values())
    return Goodput(wall_s=wall, parts_s=parts, unaccounted_s=0.0, goodput=steps_s / wall, recovery=recovery or {})


# three commits a day apart, two seeds each; the compile time grows from one commit to the next
COMPILE = [[1.0, 3.0], [4.0, 6.0], [9.0, 11.0]]
STEPS = [[20.0, 22.0], [20.0, 24.0], [21.0, 23.0]]


def _write(root: Path) -> None:
    for c, (compiles, steps) in enumerate(zip(COMPILE, STEPS, strict=True)):
        for seed, (comp, st) in enumerate(zip(compiles, steps, strict=True)):
            r = site_result(WL, "cpu-amd-epyc-2c", "torch", seed=seed, sha=f"{c}" * 40, tta_s=30.0,
                            started_at=T0 + c * DAY + timedelta(minutes=seed), mfu=None,
                            goodput=_account(comp, st))
            write_result(root / "local", r)
    write_result(root / "local", site_result(WL, "cpu-amd-epyc-2c", "deepspeed", seed=0, sha="9" * 40, mfu=None,
                                             started_at=T0 + 3 * DAY))  # a schema-2 run: no account, no bar
    # the fault scenario: rank 1 killed at step 25; seed 0 and 1 recovered, seed 2's job had no restart left
    runs = [("reached", 1.0, 3.0, 0.5, {"restarts": 1, "steps_lost": 5, "time_to_recover_s": [9.0]}),
            ("budget", 2.0, 4.0, 0.5, {"restarts": 1, "steps_lost": 5, "time_to_recover_s": [11.0]}),
            ("error", 0.0, 0.0, 0.0, {})]
    for seed, (status, lost, rec, restore, recovery) in enumerate(runs):
        r = site_result(FAULTY, "cpu-amd-epyc-2c", "torch", seed=seed, status=status, mfu=None,
                        tta_s=40.0 if status == "reached" else None, spec_hash="fa0175cafe000001",
                        started_at=T0 + timedelta(hours=seed), sha="f" * 40,
                        goodput=_account(1.0, 20.0, lost, rec, restore, recovery))
        r.config["spec"]["faults"] = {"kill_rank": 1, "kill_at_step": 25, "slow_rank": None, "slow_percent": 0.0,
                                      "stall_loader_s": 0.0, "stall_at_step": 1, "stall_every": 0}
        write_result(root / "local", r)


@pytest.fixture(scope="module")
def sites(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("goodput_history")
    _write(tmp / "results")
    build_site(tmp / "results", tmp / "indexed", use_index=True)
    build_site(tmp / "results", tmp / "walked", use_index=False)
    return tmp / "indexed", tmp / "walked"


def test_index_and_file_walk_give_the_same_pages(sites):
    indexed, walked = sites
    for w in (WL, FAULTY):
        page = workload_page(w)
        assert (indexed / page).read_bytes() == (walked / page).read_bytes()


def _open(browser, path: Path):
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.resolve().as_uri())
    return context, page, errors


def test_the_workload_page_charts_each_submissions_account_over_time(sites, browser):
    indexed, _ = sites
    context, page, errors = _open(browser, indexed / workload_page(WL))
    try:
        charts = page.locator("svg.goodput-history")
        assert charts.count() == 1  # the deepspeed run has no account: no chart of its own
        chart = charts.first
        assert chart.get_attribute("data-series") == "cpu-amd-epyc-2c · torch · fp32"
        assert chart.is_visible()
        bars = chart.locator("g.bar")
        assert bars.count() == 3  # one per submission, oldest first
        heights = []
        for i in range(3):
            rects = bars.nth(i).locator("rect[data-part]")
            h = {rects.nth(j).get_attribute("data-part"): float(rects.nth(j).get_attribute("height"))
                 for j in range(rects.count())}
            heights.append(h)
            # every part is the mean over the submission's seeds, drawn to the same scale in every bar
            assert h["compile_s"] / h["steps_s"] == pytest.approx(
                statistics.mean(COMPILE[i]) / statistics.mean(STEPS[i]), rel=0.01)
            assert "lost_s" not in h  # a part that took no time draws no segment
        # the compile regression is visible: its segment grows from commit to commit
        assert heights[0]["compile_s"] < heights[1]["compile_s"] < heights[2]["compile_s"]
        assert heights[2]["compile_s"] / heights[0]["compile_s"] == pytest.approx(10.0 / 2.0, rel=0.01)
        assert "goodput" in bars.nth(2).locator("title").first.text_content()
        legend = page.locator("#goodput-history-legend").inner_text()
        assert "compile" in legend and "training steps" in legend and "work lost" not in legend
        chart.scroll_into_view_if_needed()
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=False)
        assert not errors, errors  # drawn under the page's strict Content-Security-Policy
    finally:
        context.close()


def test_a_fault_scenarios_leaderboard_names_the_fault_the_recoveries_and_the_time_lost(sites, browser):
    indexed, _ = sites
    context, page, errors = _open(browser, indexed / workload_page(FAULTY))
    try:
        table = page.locator("table.lb").first
        heads = [t.strip() for t in table.locator("thead th").all_inner_texts()]
        row = [t.strip() for t in table.locator("tbody tr").first.locator("td").all_inner_texts()]
        cells = dict(zip(heads, row, strict=True))
        assert cells["fault"] == "kill rank 1 at step 25"
        assert cells["recovered"] == "2/3 2 restarts"  # the seed whose job was not restarted did not recover
        # median over seeds of work lost + recovery + restore: 4.5, 6.5 and 0 -> 4.5
        assert cells["time lost (s)"] == "4.50"
        assert "time to recover 10.00 s" in table.locator("tbody tr td[title^='time to recover']").get_attribute(
            "title")
        assert not errors, errors
    finally:
        context.close()
    # a workload without faults shows no fault column
    context, page, _ = _open(browser, indexed / workload_page(WL))
    try:
        assert "fault" not in page.locator("table.lb").first.locator("thead").inner_text()
    finally:
        context.close()

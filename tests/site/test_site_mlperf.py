"""Published MLPerf systems on the built site, in a real headless Chromium: reference rows with their badge on the
matching workload's leaderboard beside a local run, MLPerf's own score, the round filter, their curves beside the
local curves, and a page of its own for a benchmark TrainBench does not run."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from support import mlperf_fixture
from support.compare_factory import noisy_runs, write_all

from suite.mlperf import importer
from suite.results.record import EvalPoint
from suite.site.build import build_site
from suite.site.data import workload_page


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("mlperf-site")
    src = mlperf_fixture.unpack(tmp / "src")
    results = tmp / "results"
    importer.import_tree(src, results, "5.1.0", workers=1)
    local = noisy_runs(random.Random(3), 5, steps=1000, time_per_step_s=0.85, cv_steps=0.01, cv_time=0.01,
                       workload="nlp/llama2_70b_lora", hardware="nvidia-h100-x8", spec_hash="local0001")
    for r in local:  # a local runner's submission (simulated: 70B does not train here), with its eval curve
        r.config["spec"]["target"] = {"metric": "eval_loss", "value": 0.925, "mode": "min"}
        r.eval_curve = [EvalPoint(step=s, samples=s * 8, elapsed_s=r.time_to_target_s * s / 1000,
                                  train_s=r.time_to_target_s * s / 1000, metrics={"eval_loss": 1.0 - 0.08 * s / 1000})
                        for s in (250, 500, 750, 1000)]
    write_all(results, local)
    build_site(results, tmp / "out")
    return tmp / "out"


@pytest.mark.slow  # imports 60 logs and builds a site: ~30 s quiet, minutes at load 20
def test_published_systems_are_reference_rows_beside_local_runs(site, browser):
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto((site / "index.html").resolve().as_uri())
    page.wait_for_load_state("load")
    board = page.locator('section.workload[data-workload="nlp/llama2_70b_lora"] table.lb')
    assert board.count() == 1  # one table: the local run and the published systems together
    rows = board.locator("tbody tr")
    assert rows.count() == 4
    texts = [rows.nth(i).inner_text() for i in range(4)]
    # ranked by time: AMD's MLPerf score (10.18 min) first, the local 8xH100 (~850 s) second
    assert "amd-instinct-mi355x-x8" in texts[0] and "MLPerf v5.1 · closed · Available on-premise" in texts[0]
    assert "611.1" in texts[0]  # MLPerf's score x 60 (result_summarizer: 10.18474574915825 min), not a plain mean
    assert "nvidia-h100-x8" in texts[1] and "MLPerf" not in texts[1]
    assert "∞" in texts[3] and "2 run(s) dropped" in texts[3]
    # the round filter: only local rows, then only published ones
    page.select_option("#f-round", "local")
    assert [rows.nth(i).is_visible() for i in range(4)] == [False, True, False, False]
    page.select_option("#f-round", "MLPerf v5.1")
    assert [rows.nth(i).is_visible() for i in range(4)] == [True, False, True, True]
    assert "round=MLPerf" in page.url
    # a benchmark TrainBench does not run has its own page, reached from the index
    rgat = site / workload_page("mlperf/rgat")
    assert rgat.is_file() and page.locator(f'a[href="{workload_page("mlperf/rgat")}"]').count() == 1
    # the workload page: published curves beside the local ones on the convergence chart
    page.goto((site / workload_page("nlp/llama2_70b_lora")).resolve().as_uri())
    page.wait_for_load_state("load")
    chart = page.locator("#chart-convergence").inner_html()
    assert "nvidia-h100-x8" in chart and "AMD SMCI355X" in chart and "Krai" in chart
    assert errors == []
    page.close()

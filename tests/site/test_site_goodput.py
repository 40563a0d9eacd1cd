"""Issue 48: the run page shows a real run's wall-clock account as one stacked bar, in a real headless Chromium."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from suite import harness
from suite.results.record import read_result
from suite.site.build import build_site
from suite.specload import load_spec

SCREENSHOT = Path(os.environ.get("TRAINBENCH_GOODPUT_SCREENSHOT", "/tmp/h48_goodput.png"))


@pytest.fixture(scope="module")
def built(tmp_path_factory, digits_path_module) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("goodput")
    # a real run with a stalled loader, so the bar has a data-wait segment one can see
    overrides = {"faults.stall_loader_s": 0.5, "faults.stall_at_step": 5}
    spec = load_spec(digits_path_module, overrides, "tiny")
    _, path = harness.run(harness.RunRequest(spec=spec, results_dir=tmp / "results", threads=1, measure_peak=False,
                                             overrides=overrides))
    build_site(tmp / "results", tmp / "out")
    return path, tmp / "out"


@pytest.fixture(scope="module")
def digits_path_module() -> Path:
    return Path(__file__).resolve().parents[2] / "workloads" / "cv" / "digits_cnn.yaml"


def test_the_run_page_shows_the_account_as_one_stacked_bar(built, browser):
    path, out = built
    result = read_result(path)
    g = result.goodput
    (page_file,) = list((out / "r").glob("*.html"))  # the one run's page
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(page_file.resolve().as_uri())
        bar = page.locator("#goodput-bar")
        assert bar.is_visible()
        rects = bar.locator("rect[data-part]")
        shown = {rects.nth(i).get_attribute("data-part"): float(rects.nth(i).get_attribute("width"))
                 for i in range(rects.count())}
        # every part that took time has its segment, and the segments span the bar in the parts' proportions
        assert set(shown) == {p for p, s in g.parts_s.items() if s > 0}
        assert math.fsum(shown.values()) == pytest.approx(900, abs=0.5 * len(shown) + 0.5)
        total = math.fsum(g.parts_s.values())
        for part in ("init_s", "data_wait_s", "steps_s"):
            assert shown[part] == pytest.approx(900 * g.parts_s[part] / total, abs=0.6)
        assert "data wait" in page.locator("ul.goodput-legend").inner_text()
        page.locator("#goodput").scroll_into_view_if_needed()
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=False)
        assert not errors, errors  # the bar draws under the page's strict Content-Security-Policy
    finally:
        context.close()

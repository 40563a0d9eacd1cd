"""The hardware page (suite/site/pages/hardware/, added as one folder plus one line in PAGES) in a real headless
Chromium: every machine the results hold, where its submissions stand on each leaderboard (the ranks the index
shows, read from the index page itself), sortable, linked from every page's top bar, and its link to the index
filtered to the machine. The leaderboard fixture's order is tests/support/site_factory.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.site_factory import EXPECTED_ORDER, EXPECTED_TTA, WL, write_compare_report, write_standard
from test_site_browser import Page, tab  # noqa: F401 - the shared page fixture (`browser` is conftest.py's)

from suite.site.build import build_site


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("hw-site")
    write_standard(tmp / "results")
    compare = write_compare_report(tmp / "compare")
    build_site(tmp / "results", tmp / "out", compare=[compare])
    return tmp / "out"


def _rows(t: Page, hw: str) -> list[dict[str, str]]:
    rows = t.page.locator(f'section.machine[data-hw="{hw}"] tbody tr')
    return [{"workload": r.get_attribute("data-workload"), **dict(zip(
        ("name", "rank", "backend", "precision", "tta", "reached", "mfu", "date"),
        r.locator("td").all_inner_texts(), strict=True))} for r in rows.all()]


def test_every_machine_with_its_leaderboard_rows_as_the_index_ranks_them(tab: Page, site: Path) -> None:  # noqa: F811
    tab.open(site / "index.html")
    board = tab.page.locator(f'section[data-workload="{WL}"] table.lb tbody tr')
    index_rank = {(r.get_attribute("data-hw"), r.get_attribute("data-backend")): i
                  for i, r in enumerate(board.all(), 1)}
    assert list(index_rank) == EXPECTED_ORDER
    tab.open(site / "hardware.html")
    assert tab.page.locator("h1").inner_text() == "Hardware"
    machines = tab.page.locator("section.machine").evaluate_all("els => els.map(e => e.dataset.hw)")
    assert machines == sorted({hw for hw, _ in EXPECTED_ORDER})  # every hardware of the results, once
    for hw in machines:
        rows = [r for r in _rows(tab, hw) if r["workload"] == WL]
        mine = [(h, b) for h, b in EXPECTED_ORDER if h == hw]
        assert [r["backend"].split()[0] for r in rows] == [b for _, b in mine], hw
        for r, key in zip(rows, mine, strict=True):
            assert r["rank"] == f"{index_rank[key]} of {len(EXPECTED_ORDER)}", (hw, r)
            tta = EXPECTED_TTA[EXPECTED_ORDER.index(key)]
            assert r["tta"] == ("∞" if tta == float("inf") else f"{tta:.2f}" if tta < 100 else f"{tta:.1f}"), (hw, r)
    h200 = _rows(tab, "nvidia-h200-x8")
    assert ("nlp/char_gru", "1 of 1") in [(r["workload"], r["rank"]) for r in h200]  # its second workload
    assert "NVIDIA H200 ×8" in tab.page.locator('section.machine[data-hw="nvidia-h200-x8"] p').first.inner_text()
    assert tab.console == [] and tab.dialogs == []


def test_sortable_and_linked_from_every_page_and_to_the_filtered_index(tab: Page, site: Path) -> None:  # noqa: F811
    for page in [site / "index.html", next((site / "r").glob("*.html")), next((site / "w").glob("*.html")),
                 next((site / "compare").glob("*.html"))]:
        tab.open(page)
        tab.page.locator("header.top nav a", has_text="Hardware").click()
        tab.page.wait_for_load_state("load")
        assert tab.page.url.endswith("/hardware.html"), page
    table = tab.page.locator('section.machine[data-hw="nvidia-a100-x8"] table')
    assert [t.split()[0] for t in table.locator("tbody td:nth-child(3)").all_inner_texts()] == ["torch", "megatron"]
    table.locator("th", has_text="backend").locator("button.sort").click()  # site.js ran under the page's CSP
    assert [t.split()[0] for t in table.locator("tbody td:nth-child(3)").all_inner_texts()] == ["megatron", "torch"]
    tab.page.locator('section.machine[data-hw="nvidia-a100-x8"] a', has_text="filtered").click()
    tab.page.wait_for_load_state("load")
    board = tab.page.locator(f'section[data-workload="{WL}"] table.lb tbody tr:not([hidden])')
    assert [r.get_attribute("data-hw") for r in board.all()] == ["nvidia-a100-x8", "nvidia-a100-x8"]
    assert tab.page.locator("#f-hw").input_value() == "nvidia-a100-x8"
    assert tab.console == [] and tab.dialogs == []

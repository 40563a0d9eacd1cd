"""A study's score table and performance-profile plot on the site, checked in the real browser."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.site_factory import write_standard
from test_site_browser import Page, tab  # noqa: F401 - the shared page fixture (`browser` is conftest.py's)

from suite.site.build import build_site
from suite.studies import runner as study

XSS = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'


def report(tmp: Path) -> Path:
    def rec(w, algo, seed, tta, status="reached"):
        return {"workload": w, "algorithm": algo, "seed": seed, "status": status, "time_to_target_s": tta}

    records = [rec("cv/digits_cnn", "adamw", s, t) for s, t in enumerate((2.0, 2.2, 2.4))]
    records += [rec("cv/digits_cnn", "muon", s, t) for s, t in enumerate((1.0, 1.1, 1.2))]
    records += [rec("rl/cartpole_ppo", "adamw", s, t) for s, t in enumerate((1.0, 1.0, 1.0))]
    records += [rec("rl/cartpole_ppo", "muon", s, None, "budget") for s in range(3)]  # missed: infinitely slow
    scored = study.score(records, ["adamw", "muon"], 4.0)
    spec = study.parse_study_text("name: opt\ndescription: d\ntier: smoke\nalgorithms: [adamw, muon]\nseeds: 3\n")
    meta = {**spec.model_dump(mode="json"), "name": "opt " + XSS}  # a hostile name, as from a hand-edited file
    full = {"study": meta, "tau_max": 4.0, "generated_at": "2026-12-03T00:00:00+00:00", "aggregation": "olympic mean", "algorithms": ["adamw", "muon"],
            "algorithm_details": {}, "runs": records, "errors": 0, **scored}
    out = tmp / "study-out"
    study.write_outputs(full, out)
    return out


def test_study_page_shows_scores_and_one_profile_line_per_algorithm(tmp_path: Path, tab: Page) -> None:  # noqa: F811
    write_standard(tmp_path / "results")
    site = tmp_path / "site"
    build_site(tmp_path / "results", site, studies=[report(tmp_path)])
    pages = sorted((site / "study").glob("*.html"))
    assert len(pages) == 1
    tab.open(site / "index.html")
    link = tab.page.locator("header nav a", has_text="Study:")
    assert link.count() == 1
    link.click()
    tab.page.wait_for_load_state("load")
    assert tab.page.locator("#study-profile svg path[stroke-width='2.5']").count() == 2
    scores = tab.page.locator("#study-scores tbody tr").all_inner_texts()
    # adamw: best on cartpole (1.0) and 2x on digits; muon: best on digits, missed cartpole
    assert scores[0].split("\t")[0] == "adamw" and "2 / 2" in scores[0]
    assert scores[1].split("\t")[0] == "muon" and "1 / 2" in scores[1]
    assert "missed" in tab.page.locator("#study-times").inner_text()
    assert XSS in tab.page.locator("h1").inner_text()  # the name renders as text, inert
    assert tab.page.evaluate("window.__pwned") is None
    assert tab.console == [] and tab.dialogs == []


def test_malformed_study_file_is_named_on_its_page(tmp_path: Path) -> None:
    write_standard(tmp_path / "results")
    bad = tmp_path / "study.json"
    bad.write_text('{"study": {"name": "x"}}')
    site = tmp_path / "site"
    build_site(tmp_path / "results", site, studies=[bad])
    page = next((site / "study").glob("*.html")).read_text()
    assert "this study file could not be read" in page and "not a study report" in page
    with pytest.raises(Exception, match="not a study report"):
        build_site(tmp_path / "results", tmp_path / "site2", studies=[bad], strict=True)

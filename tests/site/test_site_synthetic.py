"""Runs on `trainbench data prepare --synthetic` files: labelled on the site, never ranked on a leaderboard
beside real data (both roads: the index and the file walk)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from benchmarks.sim.results import T0, site_result
from suite.results.record import write_result
from suite.site.build import build_site

REAL_SHA, SYN_SHA = "a" * 40, "b" * 40


def _results(root: Path) -> Path:
    for seed in range(3):  # real data, older and slower
        write_result(root, site_result(seed=seed, tta_s=20.0 + seed, sha=REAL_SHA, started_at=T0 + timedelta(minutes=seed)))
    for seed in range(3):  # synthetic data, newer and faster: it would top the board if it were ranked
        write_result(root, site_result(seed=seed, tta_s=2.0 + seed, sha=SYN_SHA, synthetic_data=True,
                                       started_at=T0 + timedelta(hours=1, minutes=seed)))
    return root


@pytest.mark.parametrize("use_index", [True, False])
def test_synthetic_runs_are_labelled_and_kept_off_the_leaderboards(tmp_path: Path, use_index: bool) -> None:
    results = _results(tmp_path / "results")
    out = tmp_path / "out"
    build_site(results, out, use_index=use_index)
    index = (out / "index.html").read_text()
    board = index[index.index('data-workload="cv/digits_cnn"'):]
    board = board[: board.index("</table>")]
    assert REAL_SHA[:10] in board and SYN_SHA[:10] not in board, "only the real-data submission is ranked"
    page = next((out / "w").glob("cv-digits_cnn-*.html")).read_text()
    boards = re.findall(r'<table class="lb sortable" id="lb-\d+">(.*?)</table>', page, re.S)
    assert boards and all(SYN_SHA[:10] not in b for b in boards)
    assert page.count("synthetic data</span>") >= 4, "the synthetic submission and its three runs are labelled"
    assert "· synthetic data" in page, "a series of its own on the charts, named"
    run_pages = [p.read_text() for p in (out / "r").glob("*.html")]
    labelled = [p for p in run_pages if 'id="synthetic-data"' in p]
    assert len(run_pages) == 6 and len(labelled) == 3


def test_variant_runs_are_labelled_and_kept_off_the_leaderboards(tmp_path: Path) -> None:
    """A `--variant tiny` run of a full recipe is another model than its description names ("Llama 3.1 8B ...
    sequence 8192"): its runs are listed with the variant's name, and no leaderboard ranks them."""
    results = tmp_path / "results"
    for seed in range(3):
        write_result(results, site_result(seed=seed, tta_s=20.0 + seed, sha=REAL_SHA,
                                          started_at=T0 + timedelta(minutes=seed)))
    tiny_sha = "c" * 40
    for seed in range(3):
        r = site_result(seed=seed, tta_s=1.0 + seed, sha=tiny_sha, spec_hash="7171717171717171",
                        started_at=T0 + timedelta(hours=2, minutes=seed))
        r.config = {**r.config, "variant": "tiny"}
        write_result(results, r)
    out = tmp_path / "out"
    build_site(results, out)
    index = (out / "index.html").read_text()
    section = index[index.index('data-workload="cv/digits_cnn"'):]
    section = section[: section.index("</section>")]
    assert REAL_SHA[:10] in section and tiny_sha[:10] not in section
    assert "newest run: variant tiny" in section
    page = next((out / "w").glob("cv-digits_cnn-*.html")).read_text()
    boards = re.findall(r'<table class="lb sortable" id="lb-\d+">(.*?)</table>', page, re.S)
    assert boards and all(tiny_sha[:10] not in b for b in boards)
    assert page.count("variant tiny</span>") >= 4 and "· variant tiny" in page
    assert sum('id="variant"' in p.read_text() for p in (out / "r").glob("*.html")) == 3

"""Runs measured on a loaded host (issue 49, point 6): labelled on the site, listed with their runs, never ranked on
a leaderboard (both roads: the index and the file walk); a quiet submission of the same configuration still is."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from benchmarks.sim.results import T0, site_result
from suite.results.record import write_result
from suite.site.build import build_site

QUIET_SHA, LOADED_SHA = "a" * 40, "d" * 40


def _loaded(r, where: str):
    """The result with a load above its host's cores at `where` (start, max: while the clock ran, end)."""
    busy = [float(r.hardware.cpu_cores) + 14.0, 9.0, 6.0]
    return r.model_copy(update={"hardware": r.hardware.model_copy(update={f"load_avg_{where}": busy})})


@pytest.mark.parametrize("use_index", [True, False])
def test_loaded_runs_are_labelled_and_kept_off_the_leaderboards(tmp_path: Path, use_index: bool) -> None:
    results = tmp_path / "results"
    for seed in range(3):  # a quiet host, older and slower
        write_result(results, site_result(seed=seed, tta_s=20.0 + seed, sha=QUIET_SHA,
                                          started_at=T0 + timedelta(minutes=seed)))
    for seed, where in zip(range(3), ("start", "max", "end"), strict=True):  # newer, faster: it would top the board
        write_result(results, _loaded(site_result(seed=seed, tta_s=2.0 + seed, sha=LOADED_SHA,
                                                  started_at=T0 + timedelta(hours=1, minutes=seed)), where))
    out = tmp_path / "out"
    build_site(results, out, use_index=use_index)
    index = (out / "index.html").read_text()
    board = index[index.index('data-workload="cv/digits_cnn"'):]
    board = board[: board.index("</table>")]
    assert QUIET_SHA[:10] in board and LOADED_SHA[:10] not in board, "only the quiet submission is ranked"
    page = next((out / "w").glob("cv-digits_cnn-*.html")).read_text()
    boards = re.findall(r'<table class="lb sortable" id="lb-\d+">(.*?)</table>', page, re.S)
    assert boards and all(LOADED_SHA[:10] not in b for b in boards)
    assert page.count("loaded host</span>") >= 4, "the loaded submission and its three runs are labelled"
    assert "· loaded host" in page, "a series of its own on the charts, named"
    run_pages = [p.read_text() for p in (out / "r").glob("*.html")]
    assert len(run_pages) == 6 and sum('id="host-load"' in p for p in run_pages) == 3


def test_a_loaded_newest_submission_does_not_hide_an_older_quiet_one(tmp_path: Path) -> None:
    """Only loaded runs since: the leaderboard keeps the quiet submission rather than showing nothing."""
    results = tmp_path / "results"
    write_result(results, site_result(seed=0, tta_s=20.0, sha=QUIET_SHA, started_at=T0))
    write_result(results, _loaded(site_result(seed=0, tta_s=2.0, sha=LOADED_SHA, started_at=T0 + timedelta(hours=1)),
                                  "max"))
    out = tmp_path / "out"
    build_site(results, out)
    index = (out / "index.html").read_text()
    board = index[index.index('data-workload="cv/digits_cnn"'):]
    board = board[: board.index("</table>")]
    assert QUIET_SHA[:10] in board and LOADED_SHA[:10] not in board

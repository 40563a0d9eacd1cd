"""`trainbench bisect`: the first slower commit of a range, each comparison decided by the A/B gate.

The search's promises are tested over simulated timings (benchmarks/sim/bisect.py: benchmarks/sim/ab.py's noise model,
decided by the gate's own interval and verdict at its settings); one slow test runs the whole thing for real
(`trainbench bisect` on a generated git repository, `trainbench ab` per comparison)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.sim.bisect import comparator, levels
from benchmarks.sim.git_repo import make_range_repo
from suite.compare import bisect as bis

ROOT = Path(__file__).resolve().parents[2]
COMMITS = [f"{i:02x}" + "c" * 38 for i in range(16)]


@pytest.mark.slow
def test_a_5pct_slowdown_is_found_in_at_most_log2_plus_2_comparisons_9_times_in_10() -> None:
    """16 commits, one of them (a different one each trial) 5% slower per step; ten bisects at the gate's settings
    (10 lockstep rounds of 200 steps, 1% floor): the culprit is named, status `found`, within ceil(log2 16) + 2 = 6
    comparisons, in at least 9 of 10."""
    limit = math.ceil(math.log2(16)) + 2
    good = 0
    for trial in range(10):
        rng = np.random.default_rng(100 + trial)
        culprit = int(rng.integers(1, 16))
        r = bis.bisect("cv/digits_cnn", "step_time", COMMITS, comparator(levels(COMMITS, {culprit: 1.05}), rng))
        good += r.status == bis.FOUND and r.culprit == COMMITS[culprit] and r.comparisons <= limit
        assert r.culprit in (None, COMMITS[culprit]), r.summary  # never a wrong culprit
    assert good >= 9


@pytest.mark.slow  # ~9 comparisons through result files and compare: ~20 s at load ~8
def test_two_slowdowns_in_the_range_are_reported_as_two(tmp_path: Path) -> None:
    """Two 5% slowdowns (commits 4 and 11): status `several changes`, both named, in the JSON and the Markdown; the
    whole path of compare (result files, then `compare`) decides each comparison."""
    calls: list[str] = []
    r = bis.bisect("cv/digits_cnn", "step_time", COMMITS,
                   comparator(levels(COMMITS, {4: 1.05, 11: 1.05}), np.random.default_rng(5), files=True, calls=calls))
    assert r.status == bis.MULTIPLE and r.culprits == [COMMITS[4], COMMITS[11]], r.summary
    assert len(calls) == r.comparisons and all(t.verdict in (bis.REGRESSED, bis.NO_CHANGE) for t in r.tested)
    data = json.loads(json.dumps(r.to_json()))
    assert data["status"] == "several changes" and data["comparisons"] == len(data["tested"])
    assert "more than one change" in bis.to_markdown(r)


def test_a_later_partial_revert_is_not_blamed_on_one_commit() -> None:
    """Commit 5 10% slower, commit 12 undoes most of it: non-monotonic, the evidence says so."""
    r = bis.bisect("cv/digits_cnn", "step_time", COMMITS,
                   comparator(levels(COMMITS, {5: 1.10, 12: 1 / 1.06}), np.random.default_rng(8)))
    assert r.status == bis.NON_MONOTONIC and "non-monotonic" in r.summary


def test_no_slowdown_is_not_reproduced_and_an_undecided_search_names_its_range() -> None:
    r = bis.bisect("cv/digits_cnn", "step_time", COMMITS, comparator(levels(COMMITS, {}), np.random.default_rng(1)))
    assert r.status == bis.NOT_REPRODUCED and r.culprit is None

    seen: list[int] = []

    def undecided(base: str, head: str, rounds: int) -> bis.Decision:
        seen.append(rounds)
        return bis.Decision(bis.SUSPICIOUS, 1.02, 0.99, 1.05, note="interval crosses the floor")

    r = bis.bisect("w", "step_time", COMMITS, undecided, rounds=10, repeats=1)
    assert seen == [10, 20]  # repeated once with twice the rounds before it counts
    assert r.status == bis.UNDECIDED and r.culprit is None and r.range == (COMMITS[0], COMMITS[15])


def _cli(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "suite.cli", "bisect", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout)


def test_bad_ranges_are_refused(tmp_path: Path) -> None:
    repo, shas = make_range_repo(tmp_path, 3, {})
    for good, bad, why in ((shas[2], shas[0], "is not an ancestor"), (shas[1], shas[1], "same commit"),
                           ("nope", shas[1], "--good 'nope': not a commit")):
        p = _cli("--repo", repo, "--good", good, "--bad", bad, "-w", "cv/digits_cnn", "--out", tmp_path / "o")
        assert p.returncode == 2 and why in p.stderr, p.stderr
    p = _cli("--repo", repo, "--good", shas[0], "--bad", shas[2], "-w", "cv/digits_cnn", "--metric", "mfu")
    assert p.returncode == 2 and "--metric 'mfu'" in p.stderr

"""Change points in the history: ruptures finds them, a permutation test keeps the significant ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.sim.ab import throughput_result
from suite.compare import history
from suite.results.record import write_result

ROOT = Path(__file__).resolve().parents[2]


def test_the_vectorised_gain_is_ruptures_own() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, 40)
    x[25:] += 3.0
    k, gain = history._best_split(x, history.MIN_SEGMENT)
    assert k == 25
    assert abs(history.best_gains((x - x.mean())[None, :], history.MIN_SEGMENT)[0] - gain) < 1e-9 * max(1, gain)


def test_a_5_percent_step_in_60_points_is_found_within_one_point() -> None:
    rng = np.random.default_rng(7)
    hits = 0
    for s in range(20):
        x = np.exp(rng.normal(0, 0.015, 60))
        x[30:] *= 1.05
        found = history.change_points(x, seed=s)
        hits += len(found) == 1 and abs(found[0].index - 30) <= 1
    assert hits >= 19, hits


def test_pure_noise_gives_at_most_one_false_change_point_per_1000_points() -> None:
    rng = np.random.default_rng(8)
    false = sum(len(history.change_points(np.exp(rng.normal(0, 0.02, 60)), seed=s)) for s in range(50))
    assert false <= 3, false  # 3,000 points: <= 1 per 1,000


def test_history_cli_reports_the_commit_range(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    for night in range(24):
        level = 0.010 * (1.08 if night >= 14 else 1.0)
        for seed in range(2):
            r = throughput_result(night * 10 + seed, level * np.exp(rng.normal(0, 0.01, 30)),
                                  git_sha=f"{night:02d}" + "a" * 38)
            write_result(tmp_path / "results", r)
    p = subprocess.run([sys.executable, "-m", "suite.cli", "history", "--results", str(tmp_path / "results"),
                        "--json", "--summary", str(tmp_path / "summary.md")], capture_output=True, text=True,
                       timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    steps = [c for c in report["change_points"] if c["metric"] == "time_per_step_s"]
    assert len(steps) == 1
    (c,) = steps
    assert c["before_sha"].startswith("13") and c["after_sha"].startswith("14") and c["worse"]
    assert abs(c["change"] - 0.08) < 0.02 and c["p_value"] <= 0.01
    assert "time_per_step_s" in (tmp_path / "summary.md").read_text()


def test_the_workload_page_marks_change_points_on_its_chart() -> None:
    from suite.site import charts, render

    rng = np.random.default_rng(3)
    ys = np.exp(rng.normal(0, 0.01, 24)) * np.where(np.arange(24) >= 12, 1.10, 1.0) * 20
    series = [charts.Series("h200 · torch · fp32", [charts.Point(1.7e9 + 86400 * i, float(y)) for i, y in enumerate(ys)])]
    marks = render.change_markers(series)
    assert len(marks) == 1 and marks[0][0] == 1.7e9 + 86400 * 12 and "change point in h200" in marks[0][1]
    svg = str(charts.line_chart(series, x_label="date", y_label="s", x_kind="time", markers=marks))
    assert svg.count('class="change-point"') == 1 and "see `trainbench history`" in svg
    flat = [charts.Series("x", [charts.Point(1.7e9 + 86400 * i, 20.0 + 0.01 * (i % 3)) for i in range(24)])]
    assert render.change_markers(flat) == []


def test_history_bad_flags_exit_2_naming_the_flag(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    for args, named in ((["--min-points", "3"], "--min-points 3"), (["--alpha", "0"], "--alpha 0"),
                        (["--results", str(tmp_path / "nope")], "no such folder")):
        p = subprocess.run([sys.executable, "-m", "suite.cli", "history", "--results", str(tmp_path / "results"),
                            *args], capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(ROOT),
                                                                                       "PATH": "/usr/bin:/bin"})
        assert p.returncode == 2 and named in p.stderr, (args, p.stderr)


def test_the_split_is_the_one_ruptures_binary_segmentation_finds() -> None:
    """The detector's split (ruptures' KernelCPD, linear kernel) is Binseg(model="l2")'s first split, and its gain
    is ruptures' own CostL2 reduction at that split."""
    import ruptures as rpt

    rng = np.random.default_rng(11)
    for n in (10, 11, 37, 120, 217):
        for _ in range(25):
            x = rng.normal(0, 1, n) + np.where(np.arange(n) >= rng.integers(1, n), rng.normal(0, 2), 0.0)
            k, gain = history._best_split(x, history.MIN_SEGMENT)
            algo = rpt.Binseg(model="l2", min_size=history.MIN_SEGMENT, jump=1).fit(x.reshape(-1, 1))
            k_ref = algo.predict(n_bkps=1)[0]
            gain_ref = algo.cost.error(0, n) - algo.cost.error(0, k_ref) - algo.cost.error(k_ref, n)
            assert k == k_ref and abs(gain - gain_ref) < 1e-9 * max(1.0, gain_ref), (n, k, k_ref)


def test_a_segment_cache_gives_what_computing_again_gives_and_a_new_point_retests_only_its_segments(monkeypatch) -> None:
    rng = np.random.default_rng(12)
    x = np.exp(rng.normal(0, 0.01, 80)) * np.where(np.arange(80) >= 30, 1.1, 1.0) * np.where(np.arange(80) >= 55, 0.9, 1)
    tested: list[int] = []
    real = history._test_segment
    monkeypatch.setattr(history, "_test_segment", lambda seg, *a: tested.append(len(seg)) or real(seg, *a))
    used: dict = {}
    first = history.change_points(x, used=used)
    assert {30, 55} <= {s.index for s in first} and len(used) == len(tested) >= 3
    tested.clear()
    assert history.change_points(x, cache=used) == first and tested == []  # unchanged: nothing tested
    grown = np.append(x, x[-1])
    reference = history.change_points(grown)
    tested.clear()
    again: dict = {}
    assert history.change_points(grown, cache=used, used=again) == reference
    # only the segments that hold the new point were tested: the whole and its right-hand side(s)
    assert tested and all(n >= 81 - 60 for n in tested) and len(tested) < len(again)

"""The convergence guard (MLPerf's Reference Convergence Points): RCPs made from blessed baselines, the checker's own
verdict, compare's Markdown and JSON, and its error rates over simulated seeds."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.sim.rcp import rates
from benchmarks.sim.results import noisy_runs, write_all
from suite.compare import rcp_guard

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _quiet_checker():
    logging.disable(logging.CRITICAL)  # the checker logs every record it reads at INFO
    yield
    logging.disable(logging.NOTSET)


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "suite.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


@pytest.mark.parametrize("cv", [0.045, 0.08])  # the median and the upper end of MLPerf 6.1's own RCP spreads
def test_false_alarms_hold_at_p_and_a_10pct_faster_candidate_is_caught(cv: float) -> None:
    """1,000 simulated A/A sets (20 reference seeds, 10 candidate seeds, rounded to the eval cadence): the share
    flagged `converged faster` stays within alpha 0.05 (plus 3 binomial standard errors); 1,000 candidates that need
    10% fewer samples, 10 seeds each, are flagged at least 90% of the time."""
    false_alarm, power = rates(np.random.default_rng(7), 1000, cv)
    assert 0.02 <= false_alarm <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 1000), false_alarm
    assert power >= 0.90, power


def _mllog(path: Path, samples: float, bs: int, benchmark: str = "llama31_8b") -> None:
    lines = [{"key": "submission_benchmark", "value": benchmark, "metadata": {}},
             {"key": "global_batch_size", "value": bs, "metadata": {}},
             {"key": "eval_accuracy", "value": 3.29, "metadata": {"samples_count": samples, "epoch_num": 0}},
             {"key": "run_stop", "value": None, "metadata": {"status": "success"}}]
    path.write_text("".join(f":::MLLOG {json.dumps({'namespace': '', 'time_ms': 1, 'event_type': 'POINT_IN_TIME', **x})}\n"
                            for x in lines))


@pytest.mark.parametrize("scale", [1.0, 0.97, 0.85])
def test_the_verdict_is_the_official_checkers_on_the_same_runs(tmp_path: Path, scale: float) -> None:
    """MLPerf-named recipe: the shipped llama31_8b RCP at batch 32; 10 candidate runs written as MLLOG files and
    checked by mlperf_logging.rcp_checker.check_directory give the same pass/fail and normalization factor."""
    from mlperf_logging.rcp_checker import rcp_checker

    rng = np.random.default_rng(3)
    samples = [float(np.ceil(s / 12288) * 12288) for s in 178000 * scale * np.exp(rng.normal(0, 0.04, 10))]
    for i, s in enumerate(samples):
        _mllog(tmp_path / f"result_{i}.txt", s, 32)
    passed, msg, norm = rcp_checker.check_directory(str(tmp_path), "training", "6.1.0", False, False,
                                                    rcp_pass="pruned_rcps")
    raw = rcp_guard.shipped_raw("llama31_8b")
    ours = rcp_guard.check_samples(raw, "llama31_8b", 32, samples, "shipped")
    assert not isinstance(ours, str) and msg == "RCP found"
    assert (ours.verdict != rcp_guard.FASTER) == passed
    assert ours.norm_factor == pytest.approx(norm)
    assert passed == (scale > 0.9)


def test_an_mlperf_recipe_outside_the_shipped_batch_sizes_is_not_judged_by_them(tmp_path: Path) -> None:
    """A CPU variant of an MLPerf benchmark at batch 4 is not the configuration MLPerf's reference ran."""
    runs = noisy_runs(random.Random(2), 5, workload="nlp/llama31_8b")
    for r in runs:
        r.config["spec"]["data"] = {"batch_size": 4}
    write_all(tmp_path, runs)
    sources = [str(p) for p in sorted(tmp_path.rglob("*.json"))]
    from suite.results.stats import figures_of

    why = rcp_guard.guard("nlp/llama31_8b", "spec0001", [figures_of(r) for r in runs], sources, {})
    assert isinstance(why, str) and "outside MLPerf's llama31_8b RCPs (16..128)" in why


def test_rcp_made_from_a_baseline_guards_compare_markdown_and_json(tmp_path: Path) -> None:
    """Promote 16 seeds, make their RCP with `trainbench baseline rcp`, then compare a candidate that needs 10% fewer
    steps: flagged, its time to target normalized with the raw figure beside it; an A/A candidate is not."""
    rng = random.Random(5)
    write_all(tmp_path / "ref", noisy_runs(rng, 16, cv_steps=0.04))
    write_all(tmp_path / "same", noisy_runs(rng, 10, cv_steps=0.04, first_seed=100))
    write_all(tmp_path / "fast", noisy_runs(rng, 10, cv_steps=0.04, steps=900, first_seed=200))
    assert cli("baseline", "promote", tmp_path / "ref", "--to", tmp_path / "bl").returncode == 0
    few = cli("baseline", "rcp", tmp_path / "bl", "--to", tmp_path / "bl", "--min-seeds", "20",
              "--global-batch-size", "64")
    assert few.returncode == 2 and "an RCP needs at least 20" in few.stderr
    stale = cli("baseline", "rcp", tmp_path / "bl", "--to", tmp_path / "bl")  # batch size from a spec of another hash
    assert stale.returncode == 2 and "the spec changed since the baseline" in stale.stderr
    assert "--global-batch-size" in stale.stderr and not list((tmp_path / "bl").rglob("*.rcp-*.json"))
    made = cli("baseline", "rcp", tmp_path / "bl", "--to", tmp_path / "bl", "--global-batch-size", "64")
    assert made.returncode == 0, made.stderr
    rcp_file = next((tmp_path / "bl").rglob("*.rcp-*.json"))
    data = json.loads(rcp_file.read_text())
    assert data["kind"] == "trainbench-rcp" and len(data["samples_to_target"]) == 16
    assert all(s == st * 64 for s, st in zip(data["samples_to_target"], data["steps_to_target"], strict=True))

    fast = cli("compare", "-b", tmp_path / "bl", "-c", tmp_path / "fast", "--format", "json")
    pair = json.loads(fast.stdout)["pairs"][0]
    assert pair["rcp"]["verdict"] == rcp_guard.FASTER and pair["rcp"]["norm_factor"] > 1.05
    tta = next(m for m in pair["metrics"] if m["name"] == "time_to_target_s")
    assert "normalized" in tta["note"]
    assert pair["rcp"]["tta_normalized_s"] == pytest.approx(pair["rcp"]["tta_raw_s"] * pair["rcp"]["norm_factor"])
    assert tta["candidate"]["center"] == pytest.approx(pair["rcp"]["tta_normalized_s"], rel=1e-6)
    md = cli("compare", "-b", tmp_path / "bl", "-c", tmp_path / "fast").stdout
    assert "converged faster than the reference" in md and "raw" in md

    same = json.loads(cli("compare", "-b", tmp_path / "bl", "-c", tmp_path / "same", "--format", "json").stdout)
    assert same["pairs"][0]["rcp"]["verdict"] != rcp_guard.FASTER


def test_the_rcps_batch_size_comes_from_the_results_and_a_contradicting_flag_is_refused(tmp_path: Path) -> None:
    """Issue 50 item 7: runs recorded at data.batch_size 32; `--global-batch-size 64` would write samples to target
    at twice the truth into an append-only file: exit 2 naming both, nothing written; without the flag the
    results' 32 is used."""
    runs = noisy_runs(random.Random(6), 8, cv_steps=0.04)
    for r in runs:
        r.config["spec"]["data"] = {"batch_size": 32}
    write_all(tmp_path / "ref", runs)
    assert cli("baseline", "promote", tmp_path / "ref", "--to", tmp_path / "bl").returncode == 0
    wrong = cli("baseline", "rcp", tmp_path / "bl", "--to", tmp_path / "bl", "--global-batch-size", "64")
    assert wrong.returncode == 2, wrong.stderr
    said = " ".join(wrong.stderr.split())
    assert "--global-batch-size 64 contradicts" in said and "recorded at data.batch_size 32" in said
    assert not list((tmp_path / "bl").rglob("*.rcp-*.json"))
    made = cli("baseline", "rcp", tmp_path / "bl", "--to", tmp_path / "bl")
    assert made.returncode == 0, made.stderr
    data = json.loads(next((tmp_path / "bl").rglob("*.rcp-*.json")).read_text())
    assert data["global_batch_size"] == 32
    assert all(s == st * 32 for s, st in zip(data["samples_to_target"], data["steps_to_target"], strict=True))

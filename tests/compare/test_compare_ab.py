"""Throughput A/B verdicts: the ratio of median step times, its two-level bootstrap interval, the noise floor
(measured A/A floor > the baseline's > default; never the candidate's), the comparison key, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.sim.ab import Noise, simulate, throughput_result, write_sides
from benchmarks.sim.results import noisy_runs, write_all
from suite.compare import ab_verdict as compare_ab
from suite.compare import model as compare_model
from suite.compare import output as compare_output
from suite.compare import tta as cmp
from suite.compare.ab_verdict import CompareInputError

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "200"})


def _verdict(tmp: Path, slowdown: float, seed: int = 0, rounds: int = 8, steps: int = 100, **kw) -> compare_model.PairReport:
    rng = np.random.default_rng(seed)
    base, head = simulate(rng, rounds, steps, slowdown, noise=Noise(**kw))
    b, h = write_sides(tmp / f"s{seed}-{slowdown}", base, head)
    (pair,) = cmp.compare([b], [h]).pairs
    return pair


def test_a_slower_head_is_regressed_and_the_same_code_is_no_change(tmp_path: Path) -> None:
    slow = _verdict(tmp_path, 1.10)
    assert slow.mode == "throughput" and slow.verdict == "regressed"
    m = slow.metric("time_per_step_s")
    assert m.ci_low > 1.01 and m.ci_low <= m.ratio <= m.ci_high and abs(m.ratio - 1.10) < 0.03
    same = _verdict(tmp_path, 1.0)
    assert same.verdict == "no change" and same.metric("time_per_step_s").ci_low < 1 < same.metric("time_per_step_s").ci_high
    fast = _verdict(tmp_path, 0.85)
    assert fast.verdict == "improved"


def test_suspicious_when_only_the_point_estimate_passes_the_floor(tmp_path: Path) -> None:
    # few rounds, runs that wander a lot on their own: a 4% point estimate, an interval that spans the floor
    found = {_verdict(tmp_path, 1.04, seed=s, rounds=4, steps=50, run_sd=0.05).verdict for s in range(6)}
    assert "suspicious" in found


def test_pairing_by_round_removes_the_rounds_drift() -> None:
    rng = np.random.default_rng(3)
    base, head = simulate(rng, 8, 100, 1.05, noise=Noise(round_sd=0.10, run_sd=0.005))
    paired = compare_ab.ratio_interval(base, head, paired=True)
    unpaired = compare_ab.ratio_interval(base, head, paired=False)
    assert (paired.ci_high - paired.ci_low) < 0.5 * (unpaired.ci_high - unpaired.ci_low)
    assert paired.ci_low > 1.0


def test_lockstep_steps_are_resampled_as_pairs() -> None:
    """In lockstep step i of both sides ran back to back; noise they share (a neighbour's burst) cancels when the
    steps are drawn as pairs: a narrower interval than when they are drawn apart, and still no false alarm."""
    rng = np.random.default_rng(5)
    noise = Noise(round_sd=0.05, run_sd=0.005, step_sd=0.05, outlier_p=0.0, moment_sd=0.30)
    base, head = simulate(rng, 4, 40, 1.10, noise=noise)
    pairs = compare_ab.ratio_interval(base, head, paired=True)
    apart = compare_ab.ratio_interval(base, [h[::-1] for h in head], paired=True)  # same steps, pairs broken
    assert (pairs.ci_high - pairs.ci_low) < 0.6 * (apart.ci_high - apart.ci_low)
    assert pairs.ci_low > 1.0 and compare_ab.verdict(pairs, 0.01)[0] == "regressed"
    false = 0
    for i in range(200):
        b, h = simulate(rng, 4, 40, 1.0, noise=noise)
        false += compare_ab.verdict(compare_ab.ratio_interval(b, h, n_boot=1000, seed=i, paired=True), 0.0)[0] \
            == "regressed"
    assert false / 200 <= 0.05, false


def test_aa_false_regressions_stay_under_alpha() -> None:
    """A/A (the same distribution both sides), simulated: `regressed` in at most alpha / 2 of comparisons
    with a zero floor (the interval's own level), and none with the default 1% floor."""
    rng = np.random.default_rng(11)
    n, false0, false1 = 200, 0, 0
    for i in range(n):
        base, head = simulate(rng, 8, 60, 1.0)
        iv = compare_ab.ratio_interval(base, head, n_boot=1000, seed=i, paired=True)
        false0 += compare_ab.verdict(iv, 0.0)[0] == "regressed"
        false1 += compare_ab.verdict(iv, 0.01)[0] == "regressed"
    assert false0 / n <= 0.05 and false1 / n <= 0.025, (false0, false1)


# ---- the noise floor ---------------------------------------------------------------------------------------


def test_the_candidates_own_floor_is_ignored_and_the_baselines_wins(tmp_path: Path) -> None:
    """A PR that sets compare.noise_floor 0.99 in its spec (not in the spec hash) cannot hide a 2x slowdown."""
    import random

    rng = random.Random(5)
    write_all(tmp_path / "b", noisy_runs(rng, 6, cv_steps=0.005, cv_time=0.005))
    write_all(tmp_path / "c", noisy_runs(rng, 6, cv_steps=0.005, cv_time=0.005, time_per_step_s=0.02,
                                         noise_floor=0.99))
    report = cmp.compare([tmp_path / "b"], [tmp_path / "c"])
    (pair,) = report.pairs
    assert pair.verdict == "regressed" and report.exit_code == 1
    assert pair.noise_floor == compare_model.DEFAULT_NOISE_FLOOR and pair.noise_floor_source == "default"
    assert "0.99 was ignored" in pair.floor_note


@pytest.mark.parametrize("floor", [-1, 1.0, 1.5])
def test_a_floor_out_of_range_is_refused_with_exit_2_and_nothing_written(tmp_path: Path, floor: float) -> None:
    import random

    rng = random.Random(1)
    write_all(tmp_path / "b", noisy_runs(rng, 5))
    write_all(tmp_path / "c", noisy_runs(rng, 5, noise_floor=floor))
    out = tmp_path / "report.md"
    p = cli("compare", "-b", str(tmp_path / "b"), "-c", str(tmp_path / "c"), "--out", str(out))
    assert p.returncode == 2 and "noise floor" in p.stderr and "outside [0, 1)" in p.stderr
    assert "config.spec.compare.noise_floor" in p.stderr and not out.exists()
    p = cli("compare", "-b", str(tmp_path / "b"), "-c", str(tmp_path / "c"), "--noise-floor", "1")
    assert p.returncode == 2 and "--noise-floor" in p.stderr


def test_a_measured_floor_from_calibrate_wins(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    a, b = write_sides(tmp_path / "aa", *simulate(rng, 6, 80, 1.0), base_noise_floor=0.2)
    p = cli("calibrate", "--a", str(a), "--b", str(b), "--to", str(tmp_path / "baselines"), "--json")
    assert p.returncode == 0, p.stderr
    (row,) = json.loads(p.stdout)
    floor_file = Path(row["path"])
    assert floor_file.name == "torch.floor.json" and 0 < row["noise_floor"] < 0.2
    base, head = write_sides(tmp_path / "ab", *simulate(rng, 6, 80, 1.0), base_noise_floor=0.2)
    report = cmp.compare([base], [head], floors=[tmp_path / "baselines"])
    (pair,) = report.pairs
    assert pair.noise_floor_source == "measured" and pair.noise_floor == row["noise_floor"]
    # the baseline spec's floor when nothing was measured
    (pair,) = cmp.compare([base], [head]).pairs
    assert pair.noise_floor_source == "spec" and pair.noise_floor == 0.2


# ---- the comparison key and bad input ----------------------------------------------------------------------


@pytest.mark.parametrize("field,base_kw,head_kw", [
    ("precision", {"base_precision": "fp32"}, {"head_precision": "bf16"}),
    ("compile", {"base_compile_": False}, {"head_compile_": True}),
    ("world_size", {"base_world_size": 1}, {"head_world_size": 2}),
])
def test_mismatched_keys_are_refused_naming_the_field(tmp_path: Path, field: str, base_kw: dict,
                                                       head_kw: dict) -> None:
    rng = np.random.default_rng(0)
    b, h = write_sides(tmp_path, *simulate(rng, 4, 30), **base_kw, **head_kw)
    with pytest.raises(CompareInputError, match=field):
        cmp.compare([b], [h])
    out = tmp_path / "r.md"
    p = cli("compare", "-b", str(b), "-c", str(h), "--out", str(out))
    assert p.returncode == 2 and field in p.stderr and not out.exists()


def test_tta_key_mismatch_is_not_comparable_naming_the_field(tmp_path: Path) -> None:
    import random

    rng = random.Random(4)
    cand = noisy_runs(rng, 5)
    for r in cand:
        r.config["precision"] = "bf16"
    write_all(tmp_path / "b", noisy_runs(rng, 5))
    write_all(tmp_path / "c", cand)
    (pair,) = cmp.compare([tmp_path / "b"], [tmp_path / "c"]).pairs
    assert pair.verdict == "not comparable" and "precision" in pair.reason and "bf16" in pair.reason


def test_throughput_against_tta_is_refused(tmp_path: Path) -> None:
    import random

    write_all(tmp_path / "tta", noisy_runs(random.Random(0), 5))
    rng = np.random.default_rng(0)
    b, _ = write_sides(tmp_path, *simulate(rng, 4, 30))
    out = tmp_path / "r.md"
    p = cli("compare", "-b", str(tmp_path / "tta"), "-c", str(b), "--out", str(out))
    assert p.returncode == 2 and "throughput result" in p.stderr and "time-to-target" in p.stderr
    assert not out.exists()


def test_too_few_steps_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    b, h = write_sides(tmp_path, *simulate(rng, 4, 5))
    p = cli("compare", "-b", str(b), "-c", str(h), "--format", "json")
    assert p.returncode == 2 and "5 measured step(s)" in p.stderr and "throughput.measure_steps" in p.stderr
    assert p.stdout == ""


def test_too_few_runs_is_not_comparable_and_exit_2(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    b, h = write_sides(tmp_path, *simulate(rng, 2, 40))
    report = cmp.compare([b], [h])
    assert report.pairs[0].verdict == "not comparable" and "too few runs" in report.pairs[0].reason
    assert report.exit_code == 2


def test_a_failed_head_run_is_not_comparable(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    b, h = write_sides(tmp_path, *simulate(rng, 4, 40))
    from suite.results.record import write_result

    write_result(h, throughput_result(9, [0.01] * 3, status="error", git_sha="head"))
    (pair,) = cmp.compare([b], [h]).pairs
    assert pair.verdict == "not comparable" and "ended error" in pair.reason


def test_json_and_markdown_carry_the_interval(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    b, h = write_sides(tmp_path, *simulate(rng, 6, 60, 1.2))
    p = cli("compare", "-b", str(b), "-c", str(h), "--format", "json")
    assert p.returncode == 1, p.stderr
    data = json.loads(p.stdout)
    (pair,) = data["pairs"]
    assert pair["mode"] == "throughput" and pair["verdict"] == "regressed"
    (m,) = pair["metrics"]
    assert m["ci_low"] > 1 and m["ci_high"] > m["ci_low"] and data["summary"]["regressed"] == 1
    md = compare_output.to_markdown(cmp.compare([b], [h]))
    assert "median step time" in md and "two-level bootstrap" in md and "[1." in md

"""Issue 48 point 4: per-rank step summaries, and a rank that holds the others back named in the warnings; a
quiet or uniformly loaded run names nobody."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from support.faults import sh, write_spec

from suite.execution import ranks
from suite.results.record import read_result

DIGITS = Path(__file__).resolve().parents[2] / "workloads" / "cv" / "digits_cnn.yaml"


def _waits(rng: random.Random, steps: int, slow_rank: int | None, extra: float, jitter: float) -> list[list[float]]:
    """What each rank waits at the agreement after each step: the last to arrive waits ~0, the others the gap."""
    out: list[list[float]] = [[], []]
    for _ in range(steps):
        arrive = [rng.expovariate(1 / jitter) for _ in range(2)]  # a loaded host delays either rank at random
        if slow_rank is not None:
            arrive[slow_rank] += extra
        last = max(arrive)
        for r in range(2):
            out[r].append(last - arrive[r] + 1e-5)
    return out


def test_the_rank_that_comes_last_every_step_is_named():
    rng = random.Random(1)
    times = [[0.010] * 40, [0.015] * 40]
    summary, warnings = ranks.summary(times, _waits(rng, 40, slow_rank=1, extra=0.008, jitter=0.0005))
    assert [r["rank"] for r in summary] == [0, 1] and summary[1]["latest_share"] > 0.9
    (w,) = warnings
    assert w.startswith("straggler: rank 1 ")


@pytest.mark.parametrize("seed", range(20))
def test_a_noisy_host_names_nobody(seed):
    # arrivals shuffled by a loaded host: delays up to several steps' length, on either rank alike
    rng = random.Random(seed)
    times = [[0.010 * rng.uniform(0.5, 3) for _ in range(40)] for _ in range(2)]
    _, warnings = ranks.summary(times, _waits(rng, 40, slow_rank=None, extra=0.0, jitter=0.008))
    assert warnings == []


def test_the_all_reduce_spans_name_the_rank_with_their_own_fields_and_words():
    rng = random.Random(3)
    times = [[0.020] * 40, [0.020] * 40]  # every step as long on both ranks: the wait hides inside the collective
    rows, warnings = ranks.summary(times, _waits(rng, 40, slow_rank=0, extra=0.01, jitter=0.0005),
                                   "the last to reach the gradient all-reduce", "allreduce_")
    assert rows[0]["allreduce_latest_share"] > 0.9 and "latest_share" not in rows[0]
    (w,) = warnings
    assert w.startswith("straggler: rank 0 was the last to reach the gradient all-reduce in ")


def test_too_few_steps_name_nobody():
    rng = random.Random(2)
    _, warnings = ranks.summary([[0.01] * 10] * 2, _waits(rng, 10, slow_rank=0, extra=0.01, jitter=0.0001))
    assert warnings == []


@pytest.mark.timeout(960)  # above its children's 900 s guard (tests/project/test_hang_guards.py)
@pytest.mark.slow
def test_a_slowed_rank_of_a_real_ddp_run_is_named_and_a_quiet_one_is_not(tmp_path):
    """Two real 2-rank runs under torchrun: rank 1 sleeps as long again as its step after every step (a test hook,
    faults.slow_rank), then the same run without it."""
    found = {}
    for name, sets in (("slow", ["--set", "faults.slow_rank=1", "--set", "faults.slow_percent=100"]), ("quiet", [])):
        res = tmp_path / name
        p = sh("run", str(DIGITS), "--variant", "tiny", *sets, "--nproc", "2", "--threads", "1", "--quiet",
               "--results", str(res), timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
        (path,) = res.rglob("*.json")
        found[name] = read_result(path)
    slow, quiet = found["slow"], found["quiet"]
    assert [r["rank"] for r in slow.goodput.ranks] == [0, 1] and slow.goodput.ranks[1]["steps"] == 40
    assert [w for w in slow.warnings if w.startswith("straggler: rank 1 ")], slow.warnings
    assert not [w for w in slow.warnings if w.startswith("straggler: rank 0")]
    assert len(quiet.goodput.ranks) == 2
    assert not [w for w in quiet.warnings if w.startswith("straggler")], quiet.warnings


@pytest.mark.timeout(960)  # above its children's 900 s guard (tests/project/test_hang_guards.py)
@pytest.mark.slow
def test_a_rank_slowed_before_the_gradient_all_reduce_is_named_from_its_time_inside_it(tmp_path):
    """Rank 1 sleeps twice its step's own time BEFORE each step (faults.slow_at: before_step): rank 0 waits for it
    inside DDP's gradient all-reduce, both reach the stop agreement together, and the spans each rank spent inside
    the all-reduce name rank 1. The quiet run of the test above (and its all-reduce spans) names nobody."""
    found = {}
    for name, sets in (("slow", ["--set", "faults.slow_rank=1", "--set", "faults.slow_percent=200", "--set",
                                 "faults.slow_at=before_step"]), ("quiet", [])):
        res = tmp_path / name
        p = sh("run", str(DIGITS), "--variant", "tiny", *sets, "--nproc", "2", "--threads", "1", "--quiet",
               "--results", str(res), timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
        (path,) = res.rglob("*.json")
        found[name] = read_result(path)
    slow, quiet = found["slow"], found["quiet"]
    named = [w for w in slow.warnings if w.startswith("straggler: rank 1 was the last to reach the gradient all-reduce")]
    assert named, (slow.warnings, slow.goodput.ranks, slow.hardware.load_avg_start)
    assert not [w for w in slow.warnings if w.startswith("straggler: rank 0")]
    # the stop agreement alone would not have seen it: rank 0's wait happened inside the collective
    assert not [w for w in slow.warnings if "the last to finish its step" in w], slow.warnings
    r0, r1 = slow.goodput.ranks
    assert r1["allreduce_latest_share"] >= 0.9 and r1["allreduce_late_median_s"] > 0.35 * r1["step_p50_s"]
    assert r0["allreduce_latest_share"] <= 0.1 and r0["allreduce_late_median_s"] == 0.0
    assert all("allreduce_latest_share" in r for r in quiet.goodput.ranks)
    assert not [w for w in quiet.warnings if w.startswith("straggler")], quiet.warnings


@pytest.mark.timeout(960)  # above its children's 900 s guard (tests/project/test_hang_guards.py)
@pytest.mark.slow
def test_a_rank_slowed_inside_its_fsdp_step_is_named_from_its_time_in_the_reduce_scatter(tmp_path):
    """FSDP2 (`--parallel fsdp=2`, 2 gloo ranks): rank 1 sleeps 30 ms inside its forward (support.faults' model,
    `sleep_rank`), after FSDP's parameter all-gather and before its gradient reduce-scatter, so rank 0 waits for it
    inside the reduce-scatter (suite/backends/parallel/fsdp_comm_timer.py) and both reach the stop agreement together.
    The spans inside FSDP's collectives name rank 1; the same run without the sleep names nobody.
    Seen (AMD EPYC Zen 5, 2 cores, load 13): rank 1 last into the reduce-scatter in 100% of 40 steps, by a median
    30.6 ms (74% of a step); the quiet run: 60% / 40%, 1.0 ms."""
    found = {}
    for name, model in (("slow", {"sleep_s": 0.03, "sleep_rank": 1}), ("quiet", {})):
        spec = write_spec(tmp_path, name, "none", steps=40, **model)
        res = tmp_path / f"results-{name}"
        p = sh("run", str(spec), "--parallel", "fsdp=2", "--nproc", "2", "--threads", "1", "--quiet",
               "--results", str(res), timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
        (path,) = res.rglob("*.json")
        found[name] = read_result(path)
    slow, quiet = found["slow"], found["quiet"]
    assert slow.parallel["fsdp"] == 2 and quiet.parallel["fsdp"] == 2
    named = [w for w in slow.warnings if w.startswith("straggler: rank 1 was the last to reach FSDP's all-gathers")]
    assert named, (slow.warnings, slow.goodput.ranks, slow.hardware.load_avg_start)
    assert not [w for w in slow.warnings if w.startswith("straggler: rank 0")]
    assert not [w for w in slow.warnings if "the last to finish its step" in w], slow.warnings  # hid in the collective
    r0, r1 = slow.goodput.ranks
    assert r1["reduce_scatter_latest_share"] >= 0.9 and r1["reduce_scatter_late_median_s"] > 0.02  # 30 ms asked
    assert r0["reduce_scatter_late_median_s"] == 0.0
    assert all("reduce_scatter_latest_share" in r for r in quiet.goodput.ranks)
    assert not [w for w in quiet.warnings if w.startswith("straggler")], quiet.warnings

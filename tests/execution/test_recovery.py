"""Issue 48 point 3: a rank SIGKILLed at step k (as a failed node looks) under torchrun's elastic agent
(`--max-restarts`): the job restarts from its last checkpoint, ends `budget` (or `reached`) with one result, and
trains exactly as an uninterrupted run did (its evaluations equal, bit for bit, on CPU); the result records the
restart, the steps lost and the time to recover, and its wall-clock account still adds up."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from support.faults import sh

from suite import harness
from suite.results.record import read_result
from suite.specload import load_spec

DIGITS = Path(__file__).resolve().parents[2] / "workloads" / "cv" / "digits_cnn.yaml"
# dropout (the RNG), a cosine schedule, AdamW's moments: everything a restore must bring back
RECIPE = ["model.dropout=0.2", "schedule.name=cosine"]


def _sets(items: list[str]) -> list[str]:
    return [a for item in items for a in ("--set", item)]


def _killed_run(tmp_path: Path, nproc: int, rank: int, layout: list[str] = ()) -> tuple[object, str]:
    res = tmp_path / "killed"
    p = sh("run", str(DIGITS), "--variant", "tiny", *_sets([*RECIPE, f"faults.kill_rank={rank}",
                                                            "faults.kill_at_step=25"]), *layout,
           "--checkpoint-every", "10", "--max-restarts", "1", "--nproc", str(nproc), "--threads", "1", "--quiet",
           "--results", str(res), timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    (path,) = res.rglob("*.json")  # one job, one result: the failed attempt recorded nothing
    return read_result(path), p.stderr


def _check_recovery(r, whole_curve) -> None:
    assert r.status == "budget" and r.steps == 40
    assert [p.metrics for p in r.eval_curve] == whole_curve  # bit for bit: the same training
    rec = r.goodput.recovery
    (event,) = rec["events"]
    # killed after step 25: the newest complete checkpoint is step 20's, or step 10's when the asynchronous write
    # of step 20 was still in flight when the rank died (a loaded host); either way the training is the same
    restored = event["restored_step"]
    assert restored in (10, 20) and event["failed_at_step"] == 25
    assert rec["restarts"] == 1 and rec["steps_lost"] == 25 - restored
    assert event["time_to_recover_s"] > event["recovery_s"] >= 0
    assert any(f"resumed from the checkpoint of step {restored}" in w for w in r.warnings)
    parts = r.goodput.parts_s
    assert parts["lost_s"] > 0 and parts["checkpoint_restore_s"] > 0 and parts["recovery_s"] >= 0
    assert math.fsum(parts.values()) == pytest.approx(r.goodput.wall_s, rel=0.01)
    assert r.goodput.checkpoint["format"] == "torch.distributed.checkpoint"


@pytest.mark.timeout(960)  # above its children's 900 s guard (tests/project/test_hang_guards.py)
@pytest.mark.slow
def test_a_killed_single_process_job_restarts_from_its_checkpoint(tmp_path):
    spec = load_spec(DIGITS, dict(s.split("=") for s in RECIPE), "tiny")
    whole, _ = harness.run(harness.RunRequest(spec=spec, results_dir=None, threads=1, measure_peak=False))
    r, stderr = _killed_run(tmp_path, nproc=1, rank=0)
    assert "exitcode: -9" in stderr  # the elastic agent saw a SIGKILL, and restarted the job
    _check_recovery(r, [p.metrics for p in whole.eval_curve])


@pytest.mark.timeout(960)  # above its children's 900 s guard (tests/project/test_hang_guards.py)
@pytest.mark.slow
@pytest.mark.parametrize("layout", [[], ["--parallel", "fsdp=2"]], ids=["ddp", "fsdp2"])
def test_a_killed_rank_of_a_two_rank_job_restarts_both_from_the_checkpoint(tmp_path, layout):
    res = tmp_path / "whole"
    p = sh("run", str(DIGITS), "--variant", "tiny", *_sets(RECIPE), *layout, "--nproc", "2", "--threads", "1",
           "--quiet", "--results", str(res), timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    (path,) = res.rglob("*.json")
    whole = read_result(path)
    r, _ = _killed_run(tmp_path, nproc=2, rank=1, layout=layout)
    assert r.world_size == 2 and r.parallel.get("fsdp", 1) == (2 if layout else 1)
    _check_recovery(r, [p.metrics for p in whole.eval_curve])


def test_bad_recovery_flags_exit_2_naming_the_flag():
    p = sh("run", str(DIGITS), "--checkpoint-every", "abc")
    assert p.returncode == 2 and "--checkpoint-every 'abc'" in p.stderr
    p = sh("run", str(DIGITS), "--max-restarts", "1", "--executor", "local")
    assert p.returncode == 2 and "--max-restarts" in p.stderr

"""Issue 48 points 2-3 beyond the torch backend: a rank of a 2-rank DeepSpeed job SIGKILLed at step 25 (as a failed
node looks) under torchrun's elastic agent (`--max-restarts 1`) restarts both ranks from DeepSpeed's own checkpoint,
and the job trains as the uninterrupted job did (its evaluations equal, bit for bit, on CPU). The in-process tests of
each engine's save and restore, with their broken-restore controls: tests/backends/test_resume_{deepspeed,torchtitan,
megatron}.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.faults import sh

from suite.results.record import read_result

DIGITS = Path(__file__).resolve().parents[2] / "workloads" / "cv" / "digits_cnn.yaml"
# the job's clock holds the failure and the restart (~30 s at load 27): a budget of seconds that no loaded host hits,
# so both runs end at the spec's 40 steps
RECIPE = ["--set", "model.dropout=0.2", "--set", "schedule.name=cosine", "--set", "budget.max_train_s=900"]


def _one(res: Path, *args: str):
    p = sh("run", str(DIGITS), "--variant", "tiny", "--backend", "deepspeed", *RECIPE, *args, "--nproc", "2",
           "--threads", "1", "--quiet", "--results", str(res), timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    (path,) = res.rglob("*.json")  # one job, one result: the failed attempt recorded nothing
    return read_result(path), p.stderr


@pytest.mark.timeout(960)  # above its children's 900 s guard (tests/project/test_hang_guards.py)
@pytest.mark.slow
def test_a_killed_rank_of_a_deepspeed_job_restarts_both_from_deepspeeds_checkpoint(tmp_path):
    whole, _ = _one(tmp_path / "whole")
    r, stderr = _one(tmp_path / "killed", "--set", "faults.kill_rank=1", "--set", "faults.kill_at_step=25",
                     "--checkpoint-every", "10", "--max-restarts", "1")
    assert "exitcode: -9" in stderr  # the elastic agent saw a SIGKILL, and restarted the job
    assert r.status == whole.status == "budget" and r.steps == 40 and r.world_size == 2
    assert [p.metrics for p in r.eval_curve] == [p.metrics for p in whole.eval_curve]  # bit for bit
    rec = r.goodput.recovery
    (event,) = rec["events"]
    assert rec["restarts"] == 1 and event["failed_at_step"] == 25 and event["restored_step"] == 20  # DeepSpeed's
    assert rec["steps_lost"] == 5 and event["time_to_recover_s"] > event["recovery_s"] >= 0  # save is synchronous
    assert r.goodput.checkpoint["format"] == "deepspeed"

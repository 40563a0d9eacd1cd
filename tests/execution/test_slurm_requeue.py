"""Issue 48 point 3 under `--executor slurm --slurm requeue=true` (sbatch --requeue), on the real one-node Slurm of
tests/support/slurm_cluster.py: a running job requeued by `scontrol requeue` (what Slurm does to a preempted job under
PreemptMode=REQUEUE, or to one whose node failed) records nothing; the driver follows it through PENDING to its next
run, which resumes from the last checkpoint (in the job folder) and records one result: the restart, its cause, the
steps lost and the time lost, and the same evaluations, bit for bit, as the uninterrupted run. Requeue without
checkpoints is refused (exit 2).

Slurm holds a requeued job back for two minutes (its BeginTime); the test sets its start time to now once Slurm lists
it as pending again, as an administrator would (`scontrol update StartTime=now`).
Seen (AMD EPYC Zen 5, 2 cores, load 11-15): requeued after step 23, restored from step 20 (3 steps, 0.21 s lost), 21.5 s
from the requeue until the job's next run started (the driver's polls, Slurm's scheduling, the interpreter's start),
time to recover 22.9 s, of a 32.1 s job; the test 2 minutes.
"""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest
from support.faults import sh, wait_for, write_spec
from test_slurm import FAST, MARGIN_S, _nothing_left, _records, _start

from suite.execution import slurm_job
from suite.results.record import read_result

STEPS = 120


def _spec(folder: Path) -> Path:
    # 50 ms of sleep a step: the requeue lands mid-run; the job's clock holds the requeue's wait, so a wide budget
    return write_spec(folder, "requeued", "none", steps=STEPS, sleep_s=0.05,
                      **{"budget.max_train_s": 3600, "target.value": 1.5})


def _latest_step(workdir: Path) -> int:
    for f in workdir.glob("*/checkpoints/latest"):
        try:
            return int(json.loads(f.read_text())["step"])
        except (OSError, ValueError, KeyError):
            return 0
    return 0


@pytest.mark.timeout(900)
@pytest.mark.slow
def test_a_requeued_job_resumes_from_its_checkpoint_and_records_the_restart(slurm_cluster, tmp_path):
    cluster = slurm_cluster
    spec = _spec(tmp_path)
    local = tmp_path / "whole"
    p = sh("run", str(spec), "--checkpoint-every", "10", "--threads", "1", "--quiet", "--results", str(local),
           timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    (path,) = local.rglob("*.json")
    whole = read_result(path)

    tag = uuid.uuid4().hex
    res = tmp_path / "res"
    driver = _start(cluster, [spec], res, tag, "--slurm", "requeue=true", "--checkpoint-every", "10")
    try:
        workdir = tmp_path / ".trainbench-slurm"
        wait_for(lambda: _latest_step(workdir) >= 20, MARGIN_S * 3, "the checkpoint of step 20")
        (job,) = cluster.jobs()
        cluster.run("scontrol", "requeue", job)  # a real requeue: Slurm ends the running job and queues it again
        wait_for(lambda: cluster.state(job) == "PENDING", MARGIN_S, "the requeued job to be pending")
        cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")  # past Slurm's two-minute hold
        out, err = driver.communicate(timeout=MARGIN_S * 6)
    except BaseException:
        driver.kill()
        raise
    assert driver.returncode == 0, err[-3000:]
    (row,) = json.loads(out[out.index("["):])  # one run, one result: the requeued attempt recorded nothing
    got = _records(res)
    assert list(got) == ["requeued"]
    r = got["requeued"][1]
    assert r.status == "budget" and r.steps == STEPS
    assert [p.metrics for p in r.eval_curve] == [p.metrics for p in whole.eval_curve]  # the same training
    rec = r.goodput.recovery
    (event,) = rec["events"]
    assert rec["restarts"] == 1 and event["cause"] == "slurm requeue" and event["attempt"] == 1
    assert event["restored_step"] >= 20 and event["failed_at_step"] >= event["restored_step"]
    assert rec["steps_lost"] == event["failed_at_step"] - event["restored_step"]
    assert event["recovery_s"] > 0 and event["time_to_recover_s"] > event["recovery_s"]
    parts = r.goodput.parts_s
    assert parts["recovery_s"] > 0 and parts["checkpoint_restore_s"] > 0
    assert math.fsum(parts.values()) == pytest.approx(r.goodput.wall_s, rel=0.01)
    assert any(f"resumed from the checkpoint of step {event['restored_step']}" in w for w in r.warnings)
    _nothing_left(cluster, tag)


def test_requeue_without_checkpoints_is_refused_naming_the_flag(tmp_path):
    spec = _spec(tmp_path)
    p = sh("run", str(spec), "--executor", "slurm", "--slurm", "requeue=true", "--results", str(tmp_path / "r"),
           *FAST, timeout=120)
    assert p.returncode == 2
    assert "--slurm requeue=true" in p.stderr and "--checkpoint-every" in p.stderr


def test_the_batch_script_asks_for_requeue_only_when_told():
    on = slurm_job.batch_script(slurm_job.parse(["requeue=true"]), Path("/tmp/job"), "tb-x", 1, Path("/src"))
    off = slurm_job.batch_script(slurm_job.parse([]), Path("/tmp/job"), "tb-x", 1, Path("/src"))
    assert "#SBATCH --requeue\n" in on and "--no-requeue" not in on
    assert f"export {slurm_job.REQUEUE_ENV}=1" in on
    assert "#SBATCH --no-requeue\n" in off and slurm_job.REQUEUE_ENV not in off

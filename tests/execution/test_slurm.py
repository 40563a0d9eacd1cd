"""`--executor slurm` against a real one-node Slurm (Debian slurm-wlm + munge, started for the session by the
`slurm_cluster` fixture, tests/support/slurm_cluster.py): the smoke tier recorded through it, and its fault
contract: a hang, a crash, a job killed whole; scancel, a time limit, preemption, a node failure (each
recorded with Slurm's word for it); the driver's SIGINT/SIGTERM (interrupted, no job left) and its SIGKILL
(the jobs run on and record their results). After each case no job and no process of the invocation is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.faults import ROOT, cli, env, json_rows, wait_for, write_spec

from suite.results.record import load_results

MARGIN_S = 60.0  # a loaded 2-core machine: job start (two interpreters importing torch) and teardown
FAST = ["--slurm", "outcome_grace_s=2", "--slurm", "poll_s=0.5"]  # the driver's waits, short for tests


def _tagged(tag: str) -> list[int]:
    """Live processes that carry this invocation's tag (the driver, and every job process: sbatch exports it)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            environ = (d / "environ").read_bytes().split(b"\0")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"TB_FAULT_TAG={tag}".encode() in environ and state not in ("Z", "X"):
            pids.append(int(d.name))
    return pids


def _nothing_left(cluster: Any, tag: str) -> None:
    deadline = time.monotonic() + MARGIN_S
    while time.monotonic() < deadline and (_tagged(tag) or cluster.jobs()):
        time.sleep(0.5)
    assert not cluster.jobs(), f"jobs left in the queue: {cluster.jobs()}"
    assert not _tagged(tag), f"processes left behind: {_tagged(tag)}"


def _records(results: Path) -> dict[str, Any]:
    loaded = load_results(results)
    assert loaded.errors == []
    return {Path(r.config["spec_source"]).stem: (path, r) for path, r in loaded.results}


def _start(cluster: Any, specs: list[Path], results: Path, tag: str, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(cli("run", *map(str, specs), "--executor", "slurm", "--results", str(results), "--json",
                                "--threads", "1", "--quiet", *FAST, *flags),
                            env=env(**cluster.env, TB_FAULT_TAG=tag), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _slow(folder: Path, name: str, steps: int = 100_000) -> Path:
    return write_spec(folder, name, "none", steps=steps, sleep_s=0.05, at_step=6,
                      ready_file=str(folder / f"{name}.ready"), **{"budget.max_train_s": 300, "target.value": 1.5})


def _job(cluster: Any, ready: Path) -> str:
    wait_for(lambda: ready.exists() and ready.read_text(), MARGIN_S * 2, f"{ready.name}")
    return cluster.job_of(int(ready.read_text()))


# ---- the smoke tier --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_smoke_tier_is_recorded_through_slurm(slurm_cluster, tmp_path):
    from suite import registry
    from suite.specload import load_spec

    smoke = {name for name, path in registry.workload_files().items() if "smoke" in load_spec(path).tiers}
    tag = uuid.uuid4().hex
    res = tmp_path / "res"
    # a relative --results, and jobs that start in another folder (--chdir=/): they write where the driver meant
    p = subprocess.run(cli("run", "--tier", "smoke", "--variant", "tiny", "--executor", "slurm", "--results", "res",
                           "--json", "--threads", "1", "--quiet", *FAST, "--slurm", "sbatch=--chdir=/"),
                       env=env(**slurm_cluster.env, TB_FAULT_TAG=tag), capture_output=True, text=True, cwd=tmp_path,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = json_rows(p.stdout)
    loaded = load_results(res)
    assert loaded.errors == [] and {r.workload for _, r in loaded.results} == smoke == {r["workload"] for r in rows}
    assert len(loaded.results) == len(smoke) == len(rows)
    assert all(r.status in ("reached", "budget") and r.steps > 0 for _, r in loaded.results)
    assert {str(path) for path, _ in loaded.results} == {r["path"] for r in rows}
    assert not list((tmp_path / ".trainbench-slurm").iterdir())  # a job folder goes once its run ended well
    _nothing_left(slurm_cluster, tag)


# ---- faults inside the run, and a job killed whole -----------------------------------------------------------------


@pytest.mark.slow
def test_a_hang_a_crash_and_a_job_killed_whole_are_recorded(slurm_cluster, tmp_path):
    hang = write_spec(tmp_path, "hang", "hang", at_step=3, **{"budget.watchdog_s": 3})
    crash = write_spec(tmp_path, "crash", "segv", at_step=3)
    killed = _slow(tmp_path, "killed")
    tag = uuid.uuid4().hex
    proc = _start(slurm_cluster, [hang, crash, killed], tmp_path / "res", tag)
    try:
        # every process of the job at once, its node-side parent first: nothing on the node can record the run
        _job(slurm_cluster, tmp_path / "killed.ready")
        worker = int((tmp_path / "killed.ready").read_text())
        host = int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(host, signal.SIGKILL)
        os.kill(worker, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=MARGIN_S * 3)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr[-3000:]
    got = _records(tmp_path / "res")
    assert set(got) == {"hang", "crash", "killed"} and len(json_rows(stdout)) == 3
    assert got["hang"][1].status == "error" and "timeout: no training step" in got["hang"][1].error
    assert got["crash"][1].status == "error" and "killed by SIGSEGV" in got["crash"][1].error
    error = got["killed"][1].error
    assert got["killed"][1].status == "error" and "without a report from its node" in error, error
    assert "slurm: job" in error and ("FAILED" in error or "CANCELLED" in error), error
    _nothing_left(slurm_cluster, tag)


# ---- what Slurm did to a run ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_scancel_time_limit_preemption_and_node_failure_are_recorded_with_slurms_reason(slurm_cluster, tmp_path):
    """`cancel` and `timeout` run in the `urgent` partition (never preempted), `preempt` and then `node_fail` in
    `debug`, each invocation started when the one before trains. The time limit is shortened to now once the
    run trains (Slurm ends it at its next time-limit check, every 30 s); the cancel and the preemption happen
    meanwhile, the node failure after."""
    cluster = slurm_cluster
    tag = uuid.uuid4().hex
    res = tmp_path / "res"
    first = _start(cluster, [_slow(tmp_path, "cancel"), _slow(tmp_path, "timeout")], res, tag,
                   "--slurm", "partition=urgent")
    second = third = None
    try:
        cancelled, timed_out = (_job(cluster, tmp_path / f"{n}.ready") for n in ("cancel", "timeout"))
        second = _start(cluster, [_slow(tmp_path, "preempt")], res, tag, "--slurm", "partition=debug")
        cluster.run("scancel", cancelled)
        cluster.end_now(timed_out)
        preempted = _job(cluster, tmp_path / "preempt.ready")  # in the CPU that `cancel` left
        cluster.preempt(cpus=2)  # runs once `timeout` has ended, making room by preempting `preempt`
        wait_for(lambda: cluster.state(preempted) in ("PREEMPTED", "COMPLETING"), MARGIN_S * 2, "the preemption")
        out_first, err_first = first.communicate(timeout=MARGIN_S * 2)
        out_second, err_second = second.communicate(timeout=MARGIN_S * 2)
        third = _start(cluster, [_slow(tmp_path, "node_fail")], res, tag)
        _job(cluster, tmp_path / "node_fail.ready")
        cluster.fail_node()
        out_third, err_third = third.communicate(timeout=MARGIN_S * 2)
    except BaseException:
        for p in (first, second, third):
            if p is not None and p.poll() is None:
                p.kill()
        raise
    cluster.wait_idle()
    assert [p.returncode for p in (first, second, third)] == [1, 1, 1], (err_first, err_second, err_third)
    assert [len(json_rows(out)) for out in (out_first, out_second, out_third)] == [2, 1, 1]
    got = _records(res)
    want = {"cancel": ("interrupted", "cancelled (scancel) (CANCELLED"),
            "timeout": ("interrupted", "reached its time limit (TIMEOUT"),
            "preempt": ("interrupted", "preempted (PREEMPTED"),
            "node_fail": ("error", "lost its node (node failure) (NODE_FAIL")}
    assert set(got) == set(want)
    for name, (status, text) in want.items():
        result = got[name][1]
        assert result.status == status and text in (result.error or ""), (name, result.status, result.error)
        assert "stopped by signal SIGTERM" in result.error and result.steps >= 6  # measured until Slurm's stop
    _nothing_left(cluster, tag)


# ---- the driver stopped, or killed ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_drivers_sigint_or_sigterm_stops_every_job_and_records_them_interrupted(slurm_cluster, tmp_path):
    """Two drivers at once, one stopped by SIGINT (Ctrl-C), one by SIGTERM; the second has a second run that
    still waits in the queue (both CPUs are busy): it is cancelled there and never starts."""
    tag = uuid.uuid4().hex
    drivers = {signal.SIGINT: _start(slurm_cluster, [_slow(tmp_path, "sigint")], tmp_path / "res", tag)}
    try:
        _job(slurm_cluster, tmp_path / "sigint.ready")
        drivers[signal.SIGTERM] = _start(slurm_cluster, [_slow(tmp_path, "sigterm"), _slow(tmp_path, "queued")],
                                         tmp_path / "res", tag)
        _job(slurm_cluster, tmp_path / "sigterm.ready")
        fired = time.time()
        for sig, proc in drivers.items():
            proc.send_signal(sig)
        outs = {sig: proc.communicate(timeout=MARGIN_S * 2) for sig, proc in drivers.items()}
    finally:
        for proc in drivers.values():
            if proc.poll() is None:
                proc.kill()
    got = _records(tmp_path / "res")
    assert set(got) == {"sigint", "sigterm"}  # `queued` never started: cancelled in the queue, nothing to record
    for sig, proc in drivers.items():
        stdout, stderr = outs[sig]
        assert proc.returncode == 1, stderr[-3000:]
        assert [r["status"] for r in json_rows(stdout)] == ["interrupted"]
        path, result = got[sig.name.lower()]
        assert result.status == "interrupted" and result.steps >= 6, result
        assert f"stopped by signal {sig.name}" in result.error and "slurm:" not in result.error, result.error
        assert path.stat().st_mtime - fired <= MARGIN_S
    _nothing_left(slurm_cluster, tag)


@pytest.mark.slow
def test_a_killed_driver_leaves_its_jobs_running_to_their_recorded_end(slurm_cluster, tmp_path):
    tag = uuid.uuid4().hex
    short = [_slow(tmp_path, "one", steps=80), _slow(tmp_path, "two", steps=80)]
    proc = _start(slurm_cluster, short, tmp_path / "res", tag)
    try:
        jobs = [_job(slurm_cluster, tmp_path / f"{n}.ready") for n in ("one", "two")]
        proc.kill()
        proc.communicate(timeout=30)
        assert set(jobs) <= set(slurm_cluster.jobs())  # the driver is gone, its jobs are not
        wait_for(lambda: len(list((tmp_path / "res").rglob("*.json"))) == 2, MARGIN_S, "both records")
    finally:
        if proc.poll() is None:
            proc.kill()
    got = _records(tmp_path / "res")
    assert {n: r.status for n, (_, r) in got.items()} == {"one": "budget", "two": "budget"}
    assert all(r.steps == 80 and r.error is None for _, r in got.values())
    _nothing_left(slurm_cluster, tag)


# ---- ranks through srun ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ranks_start_through_srun_with_the_rendezvous_from_slurms_environment(slurm_cluster, tmp_path):
    """The multi-node road on the one node there is: srun starts torchrun on every node of the job (here one), which
    meets node 0 at the address Slurm has for it; the rank is a task of a job step, and its record is written."""
    tag = uuid.uuid4().hex
    proc = _start(slurm_cluster, [_slow(tmp_path, "ranks", steps=40)], tmp_path / "res", tag, "--slurm", "srun=true")
    try:
        ready = tmp_path / "ranks.ready"
        _job(slurm_cluster, ready)
        environ = dict(e.split("=", 1) for e in
                       Path(f"/proc/{int(ready.read_text())}/environ").read_text().split("\0") if "=" in e)
        stdout, stderr = proc.communicate(timeout=MARGIN_S * 2)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    assert "SLURM_STEP_ID" in environ and environ["MASTER_ADDR"] == "127.0.0.1"  # tbnode's NodeAddr, from scontrol
    assert (environ["WORLD_SIZE"], environ["GROUP_RANK"]) == ("1", "0")
    (row,) = json_rows(stdout)
    assert row["status"] == "budget" and row["steps"] == 40 and Path(row["path"]).is_file()
    _nothing_left(slurm_cluster, tag)

"""Runs that fail on purpose, run as a user runs them: each is recorded and the suite goes on with the next."""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.faults import cli, env, json_rows, sh, wait_for, write_spec

from suite import harness
from suite.execution import child
from suite.execution import isolated as isolation
from suite.execution.watchdog import MIN_STALL_S, Limits, Watchdog
from suite.measure.host_share import WALL_CAP
from suite.results.record import load_results, read_result
from suite.specload import load_spec


def _in_process(spec_path: Path, results: Path) -> tuple:
    req = harness.RunRequest(spec=load_spec(spec_path), results_dir=results, threads=1)
    return child.execute_guarded(req)


def _no_temp_files(root: Path) -> bool:
    return not list(root.rglob(".tmp-*"))


# how late, on a loaded 2-core machine, a record may follow the moment its fault fired beyond the window that
# ends it (the parent's poll, the kill, the fallback write): measured from the fault, not from the start, so the
# start-up and init of a busy machine never count against it (as tests/execution/test_launchers_faults.py's MARGIN_S)
MARGIN_S = 45.0
GLOO_TIMEOUT_S = 300.0  # a surviving rank must never sit out gloo's collective timeout


@pytest.mark.slow
def test_every_fault_is_recorded_and_the_suite_goes_on(tmp_path):
    faults = {"raise": {}, "exit": {}, "sigkill": {}, "hang": {"budget.watchdog_s": 2}, "nan_eval": {}, "none": {}}
    specs = [str(write_spec(tmp_path, f"f_{f}", f, **kw)) for f, kw in faults.items()]
    res = tmp_path / "res"
    p = sh("run", *specs, "--results", str(res), "--json", "--threads", "1", timeout=600)
    assert p.returncode == 1, p.stderr[-3000:]  # some runs failed
    rows = json_rows(p.stdout)
    by = dict(zip(faults, rows, strict=True))  # one row per run, in order: nothing skipped after a failure
    assert by["raise"]["status"] == "error" and by["raise"]["steps"] == 2
    assert "RuntimeError: injected fault in model code at step 3" in by["raise"]["error"]
    assert "support/faults.py" in by["raise"]["error"]  # the traceback points at the model code
    # model code calling sys.exit() is a failed run, recorded by the harness with what it measured
    assert by["exit"]["status"] == "error" and by["exit"]["steps"] == 2 and "SystemExit: 3" in by["exit"]["error"]
    # a worker killed outright cannot write: the parent records how it ended
    assert by["sigkill"]["status"] == "error" and "killed by SIGKILL" in by["sigkill"]["error"]
    assert by["hang"]["status"] == "error" and by["hang"]["error"].startswith("timeout: no training step")
    assert "budget.watchdog_s=2" in by["hang"]["error"] and "time.sleep(3600)" in by["hang"]["error"]
    assert by["hang"]["steps"] == 2
    assert by["nan_eval"]["status"] == "budget" and by["nan_eval"]["final_metrics"]["loss"] == "NaN"
    assert by["none"]["status"] == "budget" and by["none"]["steps"] == 40
    # every run has exactly one valid file, and the files say what the rows say
    loaded = load_results(res)
    assert loaded.errors == [] and len(loaded.results) == len(faults)
    by_id = {r.run_id: r for _, r in loaded.results}
    for name, row in by.items():
        r = by_id[row["run_id"]]
        assert r.status == row["status"] and r.steps == row["steps"], name
        assert Path(row["path"]).exists()
    assert by_id[by["hang"]["run_id"]].total_s >= 2.0  # what was measured before the hang is kept
    assert math.isnan(by_id[by["nan_eval"]["run_id"]].final_metrics["loss"])
    assert _no_temp_files(res)
    v = sh("results", "validate", str(res))
    assert v.returncode == 0 and f"{len(faults)} valid, 0 invalid" in v.stdout


def test_fail_fast_stops_at_the_first_failure(tmp_path):
    specs = [str(write_spec(tmp_path, "boom", "raise")), str(write_spec(tmp_path, "fine", "none"))]
    p = sh("run", *specs, "--results", str(tmp_path / "res"), "--json", "--quiet", "--fail-fast")
    assert p.returncode == 1
    rows = json_rows(p.stdout)
    assert [r["status"] for r in rows] == ["error"]
    assert len(list((tmp_path / "res").rglob("*.json"))) == 1


def test_nan_loss_diverges_and_oom_says_out_of_memory(tmp_path):
    result, path = _in_process(write_spec(tmp_path, "nan", "nan", at_step=4), tmp_path / "res")
    assert result.status == "diverged" and result.steps == 4 and "non-finite loss nan at step 4" in result.error
    assert read_result(path).status == "diverged"
    result, path = _in_process(write_spec(tmp_path, "oom", "oom", at_step=4), tmp_path / "res")
    assert result.status == "error" and result.steps == 3
    assert result.error.startswith("out of memory (try a smaller data.batch_size")
    assert "OutOfMemoryError: CUDA out of memory" in result.error
    assert read_result(path).error == result.error
    # a real allocation the CPU allocator refuses (1 PiB): the same words, the allocator's own message beside
    result, _ = _in_process(write_spec(tmp_path, "cpu_oom", "cpu_oom", at_step=2), tmp_path / "res")
    assert result.status == "error" and result.error.startswith("out of memory")
    assert "can't allocate memory" in result.error and result.steps == 1


def test_nan_metrics_round_trip_through_the_file(tmp_path):
    result, path = _in_process(write_spec(tmp_path, "nan_eval", "nan_eval"), tmp_path / "res")
    assert math.isnan(result.final_metrics["loss"])
    back = read_result(path)  # before the fix, NaN was written as null and the reader refused the file
    assert math.isnan(back.final_metrics["loss"]) and all(math.isnan(p.metrics["loss"]) for p in back.eval_curve)
    assert '"NaN"' in path.read_text()  # strict JSON (no bare NaN token), so a browser's JSON.parse reads it


# ---- the watchdog's limits, on a real Run object, with a synthetic clock ---------------------------------


def _run_object(tmp_path: Path, **budget) -> harness.Run:
    spec = load_spec(write_spec(tmp_path, "w", **{f"budget.{k}": v for k, v in budget.items()}))
    return harness.Run(harness.RunRequest(spec=spec, results_dir=None))


def test_watchdog_limits_come_from_the_budget(tmp_path):
    wall = {"budget.clock": "wall"}  # the budget is wall time: the run's window is the budget plus one stall window
    lim = Limits.for_budget(load_spec(write_spec(tmp_path, "a", **{"budget.watchdog_s": 5, **wall})).budget)
    assert (lim.stall_s, lim.run_s, lim.init_s) == (5, 65, 600)
    lim = Limits.for_budget(load_spec(write_spec(tmp_path, "b")).budget)
    assert lim.stall_s == MIN_STALL_S and "default" in lim.stall_source
    lim = Limits.for_budget(load_spec(write_spec(tmp_path, "c", **{"budget.max_train_s": 3600, **wall})).budget)
    assert lim.stall_s == 900 and lim.run_s == 4500
    # a clock that may be the run's own CPU share (auto: own on a CPU) may take up to WALL_CAP x the budget of wall
    lim = Limits.for_budget(load_spec(write_spec(tmp_path, "d", **{"budget.watchdog_s": 5})).budget)
    assert lim.run_s == 60 * WALL_CAP + 5


def test_watchdog_fires_on_init_stall_and_overrun_only(tmp_path):
    run = _run_object(tmp_path, watchdog_s=2, max_train_s=10, max_init_s=5, clock="wall")
    dog = Watchdog(run, on_fire=lambda r: None, hard_exit=False)
    start = dog._started = 100.0
    assert dog.check(start + 4.9) is None
    assert "init still running after 5.1 s" in dog.check(start + 5.1)
    run.t0 = start + 1
    for step in range(1, 8):  # a healthy run: a step every 1.5 s never trips a 2 s stall limit
        run.steps = step
        assert dog.check(run.t0 + 1.5 * step) is None
    assert "no training step or evaluation finished for 2.5 s" in dog.check(run.t0 + 1.5 * 7 + 2.5)
    run.curve.append(object())  # an evaluation finishing is progress too
    assert dog.check(run.t0 + 11.9) is None
    # steps keep coming, but the run is past budget.max_train_s plus one stall window (10 + 2 s)
    run.steps += 1
    assert "past its budget (budget.max_train_s, x20 when its clock may be own) plus one watchdog window (12 s)" \
        in dog.check(run.t0 + 12.1)


def test_watchdog_records_the_run_once(tmp_path):
    run = _run_object(tmp_path, watchdog_s=0.3)
    run.t0 = time.perf_counter()
    fired = []
    dog = Watchdog(run, on_fire=fired.append, hard_exit=False, poll_s=0.02).start()
    wait_for(lambda: fired, 10, "the watchdog to fire")
    assert not dog.disarm()  # the run must not write a second result
    (result,) = fired
    assert result.status == "error" and result.error.startswith("timeout: no training step")
    assert "test_faults_runs.py" in result.error  # the main thread's stack: where it was waiting
    quiet = Watchdog(_run_object(tmp_path, watchdog_s=5), on_fire=fired.append, hard_exit=False).start()
    assert quiet.disarm() and len(fired) == 1


@pytest.mark.slow
def test_hang_holding_the_gil_is_ended_by_the_parent(tmp_path, monkeypatch):
    """libc sleep with the GIL held: the child's watchdog thread cannot run; the parent sees its heartbeat stop."""
    monkeypatch.setenv("PYTHONPATH", env()["PYTHONPATH"])
    ready = tmp_path / "ready"
    spec = load_spec(write_spec(tmp_path, "gil", "hang_gil", ready_file=str(ready), **{
        "budget.watchdog_s": 1, "budget.max_train_s": 600}))
    req = harness.RunRequest(spec=spec, results_dir=tmp_path / "res", threads=1)
    outcome = isolation.run_isolated(req, quiet=True)
    after_fault_s = time.time() - ready.stat().st_mtime  # the ready file is written as the hanging step starts
    assert outcome.result.status == "error" and outcome.returncode == -signal.SIGKILL
    quiet = re.match(r"timeout: the worker's watchdog could not run for (\d+) s", outcome.result.error)
    assert quiet and int(quiet.group(1)) >= 1 + isolation.WEDGED_MARGIN_S  # its stall window plus the margin
    # ended by the heartbeat, within its window of the hang, not by the 60 s startup + 600 s init + 601 s backstop
    assert after_fault_s <= 1 + isolation.WEDGED_MARGIN_S + MARGIN_S, after_fault_s
    assert read_result(outcome.path).run_id == outcome.result.run_id
    pid = int(ready.read_text())
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


# ---- signals: to the CLI (the user stops the suite) and to a worker only (the suite goes on) --------------


def _slow_specs(tmp_path: Path) -> tuple[list[str], Path]:
    ready = tmp_path / "ready"
    slow = write_spec(tmp_path, "slow", "none", steps=100_000, sleep_s=0.05, at_step=6, ready_file=str(ready),
                      **{"budget.max_train_s": 120, "target.value": 1.5})
    return [str(slow), str(write_spec(tmp_path, "next", "none"))], ready


# SIGTERM / SIGINT to the CLI under every launcher: tests/execution/test_launchers_faults.py (L8, L9)


@pytest.mark.slow
def test_sigterm_to_a_worker_only_is_recorded_and_the_suite_goes_on(tmp_path):
    specs, ready = _slow_specs(tmp_path)
    p = subprocess.Popen(cli("run", *specs, "--results", str(tmp_path / "res"), "--json", "--threads", "1"),
                         env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: ready.exists() and ready.read_text(), 120, "the run to reach step 6")
        worker = int(ready.read_text())
        assert worker != p.pid
        os.kill(worker, signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=120)
    finally:
        p.kill()
    rows = json_rows(stdout)
    assert [r["status"] for r in rows] == ["interrupted", "budget"], stderr[-2000:]
    assert rows[0]["error"] == "stopped by signal SIGTERM" and rows[0]["steps"] >= 6


def test_a_stop_while_the_worker_is_still_importing_says_the_user_stopped_it(tmp_path, monkeypatch):
    """A stop that reaches the child before it has put its handlers in (it is importing torch: seconds on a
    loaded machine) ends it by the signal's default action. The record says the user stopped it while it was
    starting up, not that something killed it (what an OOM kill reads like)."""
    monkeypatch.setenv("PYTHONPATH", env()["PYTHONPATH"])
    spec = load_spec(write_spec(tmp_path, "early", "none", steps=100_000, sleep_s=0.05))
    req = harness.RunRequest(spec=spec, results_dir=tmp_path / "res", threads=1)
    run = isolation.IsolatedRun(req, quiet=True, warm=False).start()  # a fresh interpreter, not the fork server
    run.stop(signal.SIGTERM)  # at once: the child is still starting Python
    while not run.poll():
        time.sleep(0.05)
    outcome = run.outcome()
    assert outcome.returncode == -signal.SIGTERM and outcome.result.status == "interrupted"
    assert outcome.result.error.startswith("interrupted: stopped by signal SIGTERM while the worker was still "
                                           "starting up"), outcome.result.error
    assert read_result(outcome.path).error == outcome.result.error
    worker = isolation.IsolatedRun(req, quiet=True, warm=False).start()
    os.kill(worker.child.pid, signal.SIGTERM)  # not from the launcher: a kill from outside, said as such
    while not worker.poll():
        time.sleep(0.05)
    other = worker.outcome().result
    assert other.status == "error" and other.error.startswith("the worker process was killed by SIGTERM"), other.error


# ---- two ranks: one killed or hung, the other ends, a result records it -----------------------------------


@pytest.mark.slow
def test_a_rank_killed_or_hung_in_a_two_process_run(tmp_path):
    def ready(name: str) -> str:  # written by each rank as step 5 (the fault's) starts
        return str(tmp_path / f"{name}.{{rank}}.ready")

    cases = {
        "kill_rank1": write_spec(tmp_path, "k1", "sigkill", at_step=5, rank=1, ready_file=ready("k1")),
        "kill_rank0": write_spec(tmp_path, "k0", "sigkill", at_step=5, rank=0, ready_file=ready("k0")),
        "hang_rank1": write_spec(tmp_path, "h1", "hang", at_step=5, rank=1, ready_file=ready("h1"),
                                 **{"budget.watchdog_s": 3}),
    }  # each job after the first shows that the suite went on; tests/backends/test_ddp.py covers a healthy 2-rank run
    res = tmp_path / "res"
    p = sh("run", *map(str, cases.values()), "--nproc", "2", "--results", str(res), "--json", timeout=600)
    assert p.returncode == 1, p.stderr[-3000:]
    by = dict(zip(cases, json_rows(p.stdout), strict=True))
    # rank 1 died: rank 0's collective fails at once (gloo: connection closed), rank 0 records it
    k1 = by["kill_rank1"]
    assert k1["status"] == "error" and k1["steps"] == 4, k1["error"]
    assert "Connection closed by peer" in k1["error"] or "Connection reset" in k1["error"]
    # rank 0 (the writer) died: torchrun ends rank 1, the parent records how the job ended
    k0 = by["kill_rank0"]
    assert k0["status"] == "error" and "without writing a result" in k0["error"] and "SIGKILL" in k0["error"]
    # rank 1 hung: both ranks' watchdogs have the same window. Either rank 0's fires first (it records the
    # timeout), or rank 1's does, exits, and rank 0's collective fails on the closed connection: both end the
    # job within seconds and rank 0 records what it measured; which one wins is a race
    h1 = by["hang_rank1"]
    assert h1["status"] == "error" and h1["steps"] == 4, h1["error"]
    assert h1["error"].startswith("timeout: no training step") or "Connection closed by peer" in h1["error"]
    loaded = load_results(res)
    assert loaded.errors == [] and len(loaded.results) == 3
    assert all(r.world_size == 2 for _, r in loaded.results)
    # nothing waited for gloo's 300 s collective timeout: each record follows its fault (the faulting rank's
    # step 5) by the fault's own window at most, however long the busy machine took to start the job
    for path, r in loaded.results:
        name = Path(r.config["spec_source"]).stem
        fired = (tmp_path / f"{name}.{1 if name in ('k1', 'h1') else 0}.ready").stat().st_mtime
        window = 3 if name == "h1" else 0
        assert path.stat().st_mtime - fired <= window + MARGIN_S < GLOO_TIMEOUT_S, (name, r.error)

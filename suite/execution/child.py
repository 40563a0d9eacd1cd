"""The child side of an isolated run: read the Job, run the harness with the watchdog armed, report.

Run as a module, this file is the child: `python -m suite.execution.child JOB.pkl` (torchrun starts one per
rank); the fork server calls `forked_main` instead. See suite/execution/isolated.py for the parent side.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite import harness
from suite.execution import faults, slurm_job
from suite.execution.processes import adopt_orphans, alive, end_descendants
from suite.execution.watchdog import Watchdog
from suite.harness import Run, RunRequest
from suite.loop.contract import ProgressFn
from suite.results import record as results
from suite.results.record import Result

_early_signals: list[int] = []  # signals the child got before the harness installed its own handlers
PARENT_POLL_S = 0.5


@dataclass
class Job:
    """What the parent hands the child."""

    req: RunRequest
    run_id: str
    quiet: bool
    report: str  # where rank 0 writes the outcome (a JSON file in the parent's private folder)
    heartbeat: str | None = None  # each rank's watchdog touches `<heartbeat>.<rank>` while it can run
    parent: tuple[int, str] | None = None  # (pid, start time) of the launching process, watched by every rank
    peak_cache: str | None = None  # measured GEMM peaks shared by the runs of one invocation
    env: dict[str, str] = field(default_factory=dict)  # set in the child before the run
    amend: str | None = None  # "module:function" Result -> Result, applied to the record before it is written


def amender(ref: str) -> Callable[[Result], Result]:
    """The function a Job's `amend` names (e.g. suite.execution.slurm_job:slurm_reason)."""
    import importlib

    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


def _watch_parent(runner: Run, parent: tuple[int, str]) -> None:
    """Stop the run (as `interrupted`, with the reason) when the launching process dies."""
    pid, start = parent

    def loop() -> None:
        while alive(pid, start):
            time.sleep(PARENT_POLL_S)
        if runner.flag.signum is None:
            runner.flag.reason = f"interrupted: the launching process (pid {pid}) died"
            runner.flag.signum = signal.SIGHUP

    threading.Thread(target=loop, name="trainbench-parent-watch", daemon=True).start()


def execute_guarded(
    req: RunRequest,
    progress: ProgressFn | None = None,
    run_id: str | None = None,
    on_written: Callable[[Result, Path | None, str | None], Any] | None = None,
    heartbeat: str | None = None,
    parent: tuple[int, str] | None = None,
    amend: Callable[[Result], Result] | None = None,
) -> tuple[Result, Path | None]:
    """harness.run() with the watchdog armed: rank 0 writes the result, or the watchdog does if the run hangs."""
    runner = Run(req, progress)
    if run_id:
        runner.run_id = run_id
    if _early_signals:  # stopped while starting up: the run ends as `interrupted` after its first step
        runner.flag.signum = _early_signals[0]
    if parent is not None:
        _watch_parent(runner, parent)
    is_main = runner.dist.is_main

    def record(result: Result) -> Path | None:
        if faults.restart_pending(result.status):
            sys.stderr.write(f"trainbench: attempt {faults.attempt()} ended {result.status}; the elastic agent restarts "
                             "the job from its last checkpoint, which records the result\n")
            return None
        if slurm_job.requeue_pending(result.status):
            sys.stderr.write(f"trainbench: Slurm requeued job {os.environ.get('SLURM_JOB_ID')}; its next run resumes "
                             "from the last checkpoint and records the result\n")
            return None
        if amend is not None and is_main:
            result = amend(result)
        try:
            path = harness.record(runner, result)
        except results.ResultWriteError as e:  # a full or read-only disk: the report still carries the result
            if on_written is None:
                raise
            on_written(result, None, str(e))
            return None
        if on_written is not None and is_main:
            on_written(result, path, None)
        return path

    beat = f"{heartbeat}.{runner.dist.rank}" if heartbeat else None
    dog = Watchdog(runner, on_fire=record, heartbeat=beat).start()
    try:
        result = runner.execute()
    finally:
        if not dog.disarm():
            threading.Event().wait()  # the watchdog is recording this run and ends the process; never write twice
    return result, record(result)


def _write_report(report: str, payload: dict[str, Any]) -> None:
    results.write_atomic(Path(report), json.dumps(payload))


def _child_main(job_path: str) -> int:
    from suite import distributed
    from suite.data.base import DataMissing
    from suite.execution.progress import printer

    # A late SIGTERM (torchrun tearing down after a peer died, the parent forwarding a second Ctrl-C) must not
    # kill this process between the end of the run and the end of its write: outside the harness's own
    # handlers a signal is only noted (one that came early still stops the run). The parent's backstop ends
    # a child that will not stop.
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda signum, _frame: _early_signals.append(signum))
    # a launcher that blocks signals in its threads (a Ray worker does) hands that mask down through exec:
    # unblock the two a stop is made of (after our handlers, so one that waited is noted, not fatal)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    adopt_orphans()  # whatever the run starts stays in this process's tree, and ends with it (below)
    with open(job_path, "rb") as f:
        job: Job = pickle.load(f)  # noqa: S301 - written by our parent, in its private 0700 folder
    os.environ.update(job.env)
    dist = distributed.from_env()
    is_main = dist.is_main
    # local rank 0 of a node other than node 0 (a multi-node run): global rank 0, on node 0, writes the result;
    # this node's launcher gets the run as its ranks saw it, marked as recorded there, and writes nothing
    node_leader = not is_main and dist.local_rank == 0
    show = printer(is_main and not job.quiet)

    def report(result: Result, path: Path | None, write_error: str | None) -> None:
        _write_report(job.report, {"result": result.model_dump_json(), "path": str(path) if path else None,
                                   "write_error": write_error})

    try:
        result, _ = execute_guarded(job.req, show, run_id=job.run_id, on_written=report, heartbeat=job.heartbeat,
                                    parent=job.parent, amend=amender(job.amend) if job.amend else None)
        if faults.restart_pending(result.status):
            return 1  # a failed worker: torchrun's agent restarts the job
        if node_leader:
            _write_report(job.report, {"result": result.model_dump_json(), "path": None, "write_error": None,
                                       "recorded_by": f"node 0 (global rank 0; this is node "
                                                      f"{os.environ.get('GROUP_RANK', '?')})"})
    except DataMissing as e:
        if is_main:
            _write_report(job.report, {"data_missing": str(e)})
        return 2
    finally:
        end_descendants()  # the run's process tree ends with the run (a reward plug-in's processes included)
        if job.parent is not None and not alive(*job.parent) and is_main:
            shutil.rmtree(Path(job_path).parent, ignore_errors=True)  # nobody is left to clean up after us
    return 0


def forked_main(job_path: str, log_path: str) -> None:
    """The fork server's child: a session of its own, output to the job's log file, then the run."""
    os.setsid()  # a terminal's Ctrl-C reaches only the launcher, which forwards exactly one signal
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    os.environ["TRAINBENCH_LAUNCHED"] = "1"
    code = _child_main(job_path)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)




if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1]))

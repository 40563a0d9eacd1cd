"""Each run in a child process of its own (torchrun for several ranks): a crash, hang or kill ends that run, not the suite.

The parent (the `trainbench run` process) hands the child a pickled RunRequest in a private temporary
folder, streams the child's output to its own stderr (keeping the tail), forwards SIGINT/SIGTERM to it,
and waits. The child runs the harness with the watchdog armed (suite/execution/watchdog.py); rank 0 writes the
result into the results folder itself, so it survives even the parent's death, then a small report that
tells the parent where it is. If the child ends without a report (killed, crashed in C, wedged with the
GIL held past the watchdog), the parent writes an `error` result (`interrupted` if the user stopped it)
that says how the child ended: a run is never silently lost.

Run as a module, this file is the child: `python -m suite.execution.isolated JOB.pkl`.
"""

from __future__ import annotations

import collections
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import suite
from suite import harness
from suite.execution.watchdog import EXIT_TIMEOUT, Limits, Watchdog
from suite.harness import ProgressFn, Run, RunRequest
from suite.results import (
    Result,
    ResultError,
    new_run_id,
    parse_result,
    read_result,
    write_atomic,
    write_result,
)

_early_signals: list[int] = []  # signals the child got before the harness installed its own handlers
STARTUP_S = 60.0  # python + torch import + (torchrun) rendezvous before the child's own watchdog is armed
TAIL_LINES = 30
EXIT_GRACE_S = 30.0  # a child that reported but does not exit (a stray thread, a hung peer) is ended after this
WEDGED_MARGIN_S = 15.0  # a watchdog silent this much longer than its own stall window is not coming back


@dataclass
class Job:
    """What the parent hands the child."""

    req: RunRequest
    run_id: str
    quiet: bool
    report: str  # where rank 0 writes the outcome (a JSON file in the parent's private folder)
    heartbeat: str | None = None  # each rank's watchdog touches `<heartbeat>.<rank>` while it can run


@dataclass
class Outcome:
    result: Result
    path: Path | None
    signalled: int | None = None  # the parent itself got this signal during the run: the user wants to stop
    data_missing: str | None = None  # the data set is not installed (bad input, nothing recorded)
    returncode: int = 0


# ---- in the child (and in-process under --no-isolate / a user's own torchrun) -------------------------


def execute_guarded(
    req: RunRequest,
    progress: ProgressFn | None = None,
    run_id: str | None = None,
    on_written: Callable[[Result, Path | None], Any] | None = None,
    heartbeat: str | None = None,
) -> tuple[Result, Path | None]:
    """harness.run() with the watchdog armed: rank 0 writes the result, or the watchdog does if the run hangs."""
    runner = Run(req, progress)
    if run_id:
        runner.run_id = run_id
    if _early_signals:  # stopped while starting up: the run ends as `interrupted` after its first step
        runner.flag.signum = _early_signals[0]
    is_main = runner.dist.is_main

    def record(result: Result) -> Path | None:
        path = harness.record(runner, result)
        if on_written is not None and is_main:
            on_written(result, path)
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
    write_atomic(Path(report), json.dumps(payload))


def _child_main(job_path: str) -> int:
    from suite import distributed
    from suite.data.base import DataMissing
    from suite.execution.progress import printer as _progress_printer

    # A late SIGTERM (torchrun tearing down after a peer died, the parent forwarding a second Ctrl-C) must not
    # kill this process between the end of the run and the end of its write: outside the harness's own
    # handlers a signal is only noted (one that came early still stops the run). The parent's backstop ends
    # a child that will not stop.
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda signum, _frame: _early_signals.append(signum))
    with open(job_path, "rb") as f:
        job: Job = pickle.load(f)  # noqa: S301 - written by our parent, in its private 0700 folder
    is_main = distributed.from_env().is_main
    show = _progress_printer(is_main and not job.quiet)

    def report(result: Result, path: Path | None) -> None:
        _write_report(job.report, {"result": result.model_dump_json(), "path": str(path) if path else None})

    try:
        execute_guarded(job.req, show, run_id=job.run_id, on_written=report, heartbeat=job.heartbeat)
    except DataMissing as e:
        if is_main:
            _write_report(job.report, {"data_missing": str(e)})
        return 2
    return 0


# ---- in the parent ------------------------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    """The child imports this very checkout of `suite` (the one the parent runs), whatever the venv holds."""
    env = dict(os.environ)
    root = str(Path(suite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["TRAINBENCH_LAUNCHED"] = "1"
    return env


def _descendants(pid: int) -> list[int]:
    """Every process below pid (Linux /proc). torchrun starts each worker in a session of its own, so
    killing torchrun's process group would leave the workers running."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def kill_tree(pid: int) -> None:
    for p in [pid, *_descendants(pid)]:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def _tee(stream: Any, tail: collections.deque[str]) -> None:
    """Child output -> our stderr, line by line (live progress), keeping the last lines for the record."""
    sink = getattr(sys.stderr, "buffer", None)
    for line in iter(stream.readline, b""):
        tail.append(line.decode("utf-8", "replace"))
        try:
            if sink is not None:
                sink.write(line)
                sink.flush()
            else:
                sys.stderr.write(line.decode("utf-8", "replace"))
                sys.stderr.flush()
        except (OSError, ValueError):
            pass  # our stderr went away: keep draining so the child never blocks on a full pipe
    stream.close()


def _stale_heartbeat(tmp: Path, limit_s: float) -> float | None:
    """Seconds since the quietest rank's watchdog last ran, if over limit_s (a C call holding the GIL)."""
    now = time.time()
    for beat in tmp.glob("heartbeat.*"):
        try:
            quiet = now - beat.stat().st_mtime
        except OSError:
            continue
        if quiet > limit_s:
            return quiet
    return None


def _how_it_ended(rc: int, backstop_s: float | None, signalled: int | None, wedged_s: float | None) -> str:
    if wedged_s is not None:
        return (f"timeout: the worker's watchdog could not run for {wedged_s:.0f} s (a call holding the GIL "
                "never returned); killed by the parent")
    if backstop_s is not None:
        why = "after the stop signal" if signalled else "and its watchdog did not end it"
        return f"timeout: the worker made no progress {why}; killed after {backstop_s:.0f} s"
    if signalled and rc == -signal.SIGKILL:
        return "interrupted: stopped by a third signal; the worker was killed before it wrote a result"
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        hint = " (the kernel's out-of-memory killer sends SIGKILL: check `dmesg`)" if -rc == signal.SIGKILL else ""
        return f"the worker process was killed by {name} before it wrote a result{hint}"
    if rc == EXIT_TIMEOUT:
        return "timeout: the worker's watchdog fired but could not record the result"
    return f"the worker process exited with code {rc} without writing a result"


def _fallback(req: RunRequest, run_id: str, nproc: int, status: str, error: str) -> Result:
    from suite import distributed

    runner = Run(req)
    runner.run_id = run_id
    runner.dist = distributed.DistInfo(rank=0, world=nproc, local_rank=0, local_world=nproc)
    runner.status, runner.error = status, error
    return runner.result()


def _read_report(report: Path) -> dict[str, Any] | None:
    """The child's report, or None if there is none (it is written atomically: whole or absent)."""
    try:
        payload = json.loads(report.read_text(encoding="utf-8"))
        if "data_missing" not in payload:
            parse_result(payload["result"], "worker report")
        return payload
    except (OSError, ValueError, KeyError, TypeError, ResultError):
        return None


def _find_written(results_dir: Path | None, run_id: str) -> tuple[Result, Path] | None:
    """The child may have written its result and died before its report: find it by run id, never write twice."""
    if results_dir is None or not results_dir.exists():
        return None
    for path in results_dir.rglob(f"*-{run_id}.json"):
        try:
            return read_result(path), path
        except ResultError:
            continue
    return None


def run_isolated(
    req: RunRequest, nproc: int = 1, quiet: bool = False, startup_s: float = STARTUP_S
) -> Outcome:
    """Run one seed in a child process (torchrun with `nproc` ranks when nproc > 1) and return its outcome."""
    limits = Limits.for_budget(req.spec.budget)
    run_id = new_run_id()
    with tempfile.TemporaryDirectory(prefix="trainbench-run-") as tmp:
        job_path = Path(tmp) / "job.pkl"
        report = Path(tmp) / "report.json"
        with open(job_path, "wb") as f:
            pickle.dump(Job(req=req, run_id=run_id, quiet=quiet, report=str(report),
                            heartbeat=str(Path(tmp) / "heartbeat")), f)
        if nproc > 1:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                   "-m", "suite.execution.isolated", str(job_path)]
        else:
            cmd = [sys.executable, "-m", "suite.execution.isolated", str(job_path)]
        # a session of its own: a terminal's Ctrl-C reaches only us, and we forward exactly one signal
        proc = subprocess.Popen(cmd, env=_child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        reader = threading.Thread(target=_tee, args=(proc.stdout, tail), daemon=True)
        reader.start()
        started = time.monotonic()
        deadline = [started + startup_s + limits.worst_case_s()]
        signals: list[int] = []

        def forward(signum: int, _frame: Any) -> None:
            signals.append(signum)
            if len(signals) >= 3:  # a third signal: stop now, whatever the run was doing
                kill_tree(proc.pid)
                return
            try:
                os.kill(proc.pid, signum)  # torchrun passes it on to every rank
            except OSError:
                pass
            # the run stops after the step in progress; one stall window (plus torchrun's teardown) is plenty
            deadline[0] = min(deadline[0], time.monotonic() + limits.stall_s + 40)

        old: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        backstop_s = wedged_s = reported_at = None
        try:
            while True:
                try:
                    rc = proc.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    if backstop_s is not None or wedged_s is not None:
                        continue  # killed: reap it
                    if reported_at is None and report.exists():
                        reported_at = time.monotonic()
                    if reported_at is not None:  # the result is safe: only the exit is left
                        if time.monotonic() - reported_at > EXIT_GRACE_S:
                            kill_tree(proc.pid)
                            reported_at = float("inf")
                        continue
                    wedged_s = _stale_heartbeat(Path(tmp), limits.stall_s + WEDGED_MARGIN_S)
                    if wedged_s is not None:
                        kill_tree(proc.pid)
                    elif time.monotonic() > deadline[0]:
                        backstop_s = time.monotonic() - started
                        kill_tree(proc.pid)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        reader.join(timeout=10)
        signalled = signals[0] if signals else None
        payload = _read_report(report)
        if payload is not None and "data_missing" in payload:
            return Outcome(_fallback(req, run_id, nproc, "error", payload["data_missing"]), None,
                           signalled, payload["data_missing"], rc)
        if payload is not None:
            result = parse_result(payload["result"], "worker report")
            return Outcome(result, Path(payload["path"]) if payload["path"] else None, signalled, None, rc)
    found = _find_written(req.results_dir, run_id)
    if found is not None:
        return Outcome(found[0], found[1], signalled, None, rc)
    how = _how_it_ended(rc, backstop_s, signalled, wedged_s)
    last = "".join(tail).strip()[-3000:]
    error = f"{how}\nlast output of the worker:\n{last}" if last else how
    result = _fallback(req, run_id, nproc, "interrupted" if signalled else "error", error)
    path = write_result(req.results_dir, result) if req.results_dir is not None else None
    return Outcome(result, path, signalled, None, rc)


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1]))

"""Each run in a child process of its own (torchrun for several ranks): a crash, hang or kill ends that run, not the suite.

Every launcher (suite/execution/launch.py) runs each run through `IsolatedRun`. The parent hands the child a
pickled `Job` in a private folder, copies the child's output (a file there, never a pipe, so the child can
not die of a closed pipe) to its own stderr, keeps the tail, and watches: the child's heartbeat (a wedged
child whose watchdog thread cannot run), a backstop deadline, and an exit grace after it reported. The child
runs the harness with the watchdog armed (suite/execution/watchdog.py); rank 0 writes the result into the
results folder itself, so it survives even the parent's death, then a small report that tells the parent
where it is. If the child ends without a report, the parent writes an `error` result (`interrupted` if the
user stopped it) that says how the child ended: a run is never silently lost.

Warm start: a single-process child is forked from a fork server that has already imported torch and the
suite (`multiprocessing`'s forkserver), so a run pays ~0.1 s to start instead of a Python + torch import.
Several ranks start under torchrun, fresh processes as torchrun makes them.

The parent's death: every rank watches the process that launched it; when it is gone, the run stops at the
next step as `interrupted` ("the launching process died"), rank 0 records it, and nothing is left running.

The child's side is suite/execution/child.py; process helpers (/proc) are suite/execution/processes.py.
"""

from __future__ import annotations

import collections
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import suite
from suite.backends.resume import DIR_ENV, default_root
from suite.execution import forkserver
from suite.execution.child import Job, forked_main
from suite.execution.launch import Outcome
from suite.execution.processes import (
    JOB_PREFIX,
    kill_tree,
    nnodes_of,
    process_start_time,
    torchrun_command,
    torchrun_env,
)
from suite.execution.watchdog import EXIT_TIMEOUT, Limits
from suite.harness import RunRequest
from suite.measure.environment import fingerprint
from suite.results import dead_runs
from suite.results import record as results

__all__ = ["IsolatedRun", "run_isolated"]

STARTUP_S = 60.0  # python + torch import + (torchrun) rendezvous before the child's own watchdog is armed
TAIL_LINES = 30
EXIT_GRACE_S = 30.0  # a child that reported but does not exit (a stray thread, a hung peer) is ended after this
WEDGED_MARGIN_S = 15.0  # a watchdog silent this much longer than its own stall window is not coming back


def _child_env() -> dict[str, str]:
    """The child imports this very checkout of `suite` (the one the parent runs), whatever the venv holds."""
    env = dict(os.environ)
    root = str(Path(suite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["TRAINBENCH_LAUNCHED"] = "1"
    return env


class _Child:
    """A started child, whichever way it started: pid, exit code (negative: killed by that signal)."""

    def __init__(self, popen: subprocess.Popen[bytes] | None = None, process: Any = None):
        self.popen, self.process = popen, process
        self.pid: int = popen.pid if popen is not None else process.pid

    def poll(self) -> int | None:
        if self.popen is not None:
            return self.popen.poll()
        if self.process.is_alive():
            return None
        self.process.join()
        return self.process.exitcode


def _how_it_ended(rc: int, backstop_s: float | None, signalled: int | None, wedged_s: float | None) -> str:
    if wedged_s is not None:
        return (f"timeout: the worker's watchdog could not run for {wedged_s:.0f} s (a call holding the GIL "
                "never returned); killed by the parent")
    if backstop_s is not None:
        why = "after the stop signal" if signalled else "and its watchdog did not end it"
        return f"timeout: the worker made no progress {why}; killed after {backstop_s:.0f} s"
    if signalled and rc == -signal.SIGKILL:
        return "interrupted: stopped by a third signal; the worker was killed before it wrote a result"
    if signalled and rc == -signalled:  # after its handlers are in, a child only notes SIGINT/SIGTERM
        return (f"interrupted: stopped by signal {signal.Signals(signalled).name} while the worker was still "
                "starting up (importing its libraries), before it could record anything")
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        hint = " (the kernel's out-of-memory killer sends SIGKILL: check `dmesg`)" if -rc == signal.SIGKILL else ""
        return f"the worker process was killed by {name} before it wrote a result{hint}"
    if rc == EXIT_TIMEOUT:
        return "timeout: the worker's watchdog fired but could not record the result"
    return f"the worker process exited with code {rc} without writing a result"


def _read_report(report: Path) -> dict[str, Any] | None:
    """The child's report, or None if there is none (it is written atomically: whole or absent)."""
    try:
        payload = json.loads(report.read_text(encoding="utf-8"))
        if "data_missing" not in payload:
            results.parse_result(payload["result"], "worker report")
        return payload
    except (OSError, ValueError, KeyError, TypeError, results.ResultError):
        return None


class IsolatedRun:
    """One run in a child process, driven by `start`, `poll` (until True), `stop`, then `outcome`.

    A launcher drives many at once from one thread; nothing here installs signal handlers.
    """

    def __init__(self, req: RunRequest, nproc: int = 1, quiet: bool = False, startup_s: float = STARTUP_S,
                 warm: bool = True, peak_cache: str | None = None, echo: Callable[[bytes], None] | None = None,
                 torchrun_args: list[str] | None = None, parent: tuple[int, str] | None = None,
                 run_id: str | None = None, tmp_root: str | None = None, ranks_command: list[str] | None = None,
                 amend: str | None = None, fork: bool = False):
        self.req, self.nproc, self.quiet, self.startup_s = req, nproc, quiet, startup_s
        self.warm, self.peak_cache = warm and nproc == 1, peak_cache
        self.echo = echo if echo is not None else _echo_stderr
        self.torchrun_args = torchrun_args or ["--standalone"]
        # several ranks here, or one rank of a multi-node job: torchrun starts them (fresh processes)
        self.under_torchrun = nproc > 1 or self.torchrun_args != ["--standalone"]
        self.world = nproc * nnodes_of(self.torchrun_args)  # every node's ranks (what a fallback record says)
        self.warm = self.warm and not self.under_torchrun
        # fork from this very process, which has imported what the child needs (a Slurm job's node side is its
        # own warm server: one import of torch per job instead of two)
        self.fork = fork and nproc == 1 and not self.under_torchrun
        self.parent = parent  # the process whose death stops the run (default: this one, the launcher)
        self.limits = Limits.for_run(req.spec, req.mlperf_division)
        self.run_id = run_id or results.new_run_id()
        # Slurm (suite/execution/slurm_node.py): the private folder on a filesystem every node sees, the ranks
        # started by a command of its own (srun on every node; the job file's path is appended), and a
        # "module:function" that adds what the scheduler did to the record (the child's and the fallback)
        self.tmp_root, self.ranks_command, self.amend = tmp_root, ranks_command, amend
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.signals: list[int] = []
        self.child: _Child | None = None
        self.rc: int | None = None
        self.backstop_s: float | None = None
        self.wedged_s: float | None = None
        self._reported_at: float | None = None
        self._log_pos = 0
        self._partial = b""

    # ---- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> IsolatedRun:
        self.tmp = Path(tempfile.mkdtemp(prefix=JOB_PREFIX, dir=self.tmp_root))
        self.report, self.log = self.tmp / "report.json", self.tmp / "output.log"
        me = self.parent or (os.getpid(), process_start_time(os.getpid()) or "")
        job = Job(req=self.req, run_id=self.run_id, quiet=self.quiet, report=str(self.report),
                  heartbeat=str(self.tmp / "heartbeat"), parent=me, peak_cache=self.peak_cache, amend=self.amend,
                  env={"TRAINBENCH_PEAK_CACHE": self.peak_cache} if self.peak_cache else {})
        job_path = self.tmp / "job.pkl"
        with open(job_path, "wb") as f:
            pickle.dump(job, f)
        self.log.touch()
        if self.warm or self.fork:
            import multiprocessing

            ctx = multiprocessing.get_context("fork") if self.fork else forkserver.context()
            proc = ctx.Process(target=forked_main, args=(str(job_path), str(self.log)), daemon=False)
            proc.start()
            self.child = _Child(process=proc)
        else:
            if self.ranks_command is not None:
                cmd = [*self.ranks_command, str(job_path)]
            elif self.under_torchrun:
                cmd = torchrun_command(self.nproc, "suite.execution.child", [str(job_path)], self.torchrun_args)
            else:
                cmd = [sys.executable, "-m", "suite.execution.child", str(job_path)]
            with open(self.log, "ab") as out:
                # a session of its own: a terminal's Ctrl-C reaches only us, and we forward exactly one signal
                env = torchrun_env(_child_env()) if self.under_torchrun else _child_env()
                popen = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
            self.child = _Child(popen=popen)
        results.write_atomic(self.tmp / "owner.json", json.dumps({
            "parent": me[0], "parent_start": me[1], "child": self.child.pid,
            "child_start": process_start_time(self.child.pid)}))
        self.started = time.monotonic()
        self.deadline = self.started + self.startup_s + self.limits.worst_case_s()
        return self

    def stop(self, signum: int) -> None:
        """The launcher was asked to stop: pass the signal on (a third one kills at once)."""
        self.signals.append(signum)
        if self.child is None or self.rc is not None:
            return
        if len(self.signals) >= 3:
            kill_tree(self.child.pid)
            return
        try:
            os.kill(self.child.pid, signum)  # torchrun passes it on to every rank
        except OSError:
            pass
        # the run stops after the step in progress; one stall window (plus torchrun's teardown) is plenty
        self.deadline = min(self.deadline, time.monotonic() + self.limits.stall_s + 40)

    def noted(self, signum: int) -> None:
        """The child got this stop signal itself (a scheduler signals every process of a job): count it as a
        stop, for the record and the backstop, without sending it a second time."""
        self.signals.append(signum)
        if self.child is not None and self.rc is None:
            self.deadline = min(self.deadline, time.monotonic() + self.limits.stall_s + 40)

    def poll(self) -> bool:
        """Copy new output, enforce the backstops; True once the child has exited."""
        assert self.child is not None, "start() first"
        self._pump()
        if self.rc is not None:
            return True
        rc = self.child.poll()
        if rc is not None:
            self.rc = rc
            self._pump(final=True)
            return True
        if self.backstop_s is not None or self.wedged_s is not None:
            return False  # killed: wait to reap it
        now = time.monotonic()
        if self._reported_at is None and self.report.exists():
            self._reported_at = now
        if self._reported_at is not None:  # the result is safe: only the exit is left
            if now - self._reported_at > EXIT_GRACE_S:
                kill_tree(self.child.pid)
                self._reported_at = float("inf")
            return False
        self.wedged_s = _stale_heartbeat(self.tmp, self.limits.stall_s + WEDGED_MARGIN_S)
        if self.wedged_s is not None:
            kill_tree(self.child.pid)
        elif now > self.deadline:
            self.backstop_s = now - self.started
            kill_tree(self.child.pid)
        return False

    def kill(self) -> None:
        if self.child is not None and self.rc is None:
            kill_tree(self.child.pid)

    def outcome(self) -> Outcome:
        """The run's Outcome (after poll() said True); writes the fallback record when the child wrote none."""
        rc = self.rc if self.rc is not None else -signal.SIGKILL
        signalled = self.signals[0] if self.signals else None
        try:
            payload = _read_report(self.report)
            if payload is not None and "data_missing" in payload:
                result = dead_runs.error_result(self.req, "error", f"DataMissing: {payload['data_missing']}",
                                              fingerprint(self.nproc), run_id=self.run_id, world_size=self.world)
                return Outcome(result, None, signalled, payload["data_missing"], rc)
            if payload is not None:
                result = results.parse_result(payload["result"], "worker report")
                return Outcome(result, Path(payload["path"]) if payload["path"] else None, signalled, None, rc,
                               payload.get("write_error"), payload.get("recorded_by"))
            found = dead_runs.find_by_run_id(self.req.results_dir, self.run_id)
            if found is not None:
                return Outcome(found[1], found[0], signalled, None, rc)
            how = _how_it_ended(rc, self.backstop_s, signalled, self.wedged_s)
            last = "".join(self.tail).strip()[-3000:]
            error = f"{how}\nlast output of the worker:\n{last}" if last else how
            result = dead_runs.error_result(self.req, "interrupted" if signalled else "error", error,
                                          fingerprint(self.nproc), run_id=self.run_id, world_size=self.world)
            if self.amend:
                from suite.execution.child import amender

                result = amender(self.amend)(result)
            try:
                path = results.write_run(self.req.results_dir, result) if self.req.results_dir else None
            except results.ResultWriteError as e:
                return Outcome(result, None, signalled, None, rc, str(e))
            return Outcome(result, path, signalled, None, rc)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
            if self.req.checkpoint_dir is None and not os.environ.get(DIR_ENV):  # the job is over: its checkpoints
                shutil.rmtree(default_root(self.run_id), ignore_errors=True)  # in the temporary folder go with it

    # ---- output -----------------------------------------------------------------------------------------

    def _pump(self, final: bool = False) -> None:
        try:
            with open(self.log, "rb") as f:
                f.seek(self._log_pos)
                data = f.read()
        except OSError:
            return
        self._log_pos += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = b"" if final else lines.pop()
        for line in lines:
            if final and not line:
                continue
            self.tail.append(line.decode("utf-8", "replace") + "\n")
            self.echo(line + b"\n")


def _echo_stderr(line: bytes) -> None:
    """Child output -> our stderr (live progress); a closed stderr is ignored, never fatal."""
    try:
        sink = getattr(sys.stderr, "buffer", None)
        if sink is not None:
            sink.write(line)
            sink.flush()
        else:
            sys.stderr.write(line.decode("utf-8", "replace"))
            sys.stderr.flush()
    except (OSError, ValueError):
        pass


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


def run_isolated(req: RunRequest, nproc: int = 1, quiet: bool = False, startup_s: float = STARTUP_S,
                 warm: bool = True) -> Outcome:
    """One run in a child process, start to finish, from the main thread (SIGINT/SIGTERM are forwarded)."""
    from suite.execution.launch import Control

    run = IsolatedRun(req, nproc=nproc, quiet=quiet, startup_s=startup_s, warm=warm).start()
    control = Control()
    with control.catch_signals():
        while not run.poll():
            while len(run.signals) < control.count:
                run.stop(control.signum or signal.SIGTERM)
            time.sleep(0.1)
    return run.outcome()

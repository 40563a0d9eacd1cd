"""A per-run wall-clock watchdog: a run that stops making progress ends as `error` (timeout), keeping what it measured.

A hung step cannot be interrupted from Python (a C call that never returns, a collective waiting for a
peer that is stuck), so the watchdog does not try to unwind it. Its thread builds the Result from what the
run has measured so far, hands it to `on_fire` (which writes it), and hard-exits the process. That is why
the CLI runs each run in a child process of its own (suite/execution/isolated.py): the suite goes on with the next.

Limits, all from the spec's budget:
- init: `WorkloadSpec.init_limit(division)`: `budget.max_init_s` when set, else MLPerf's init limit of the
  run's division for a full-tier spec (30 min closed, 240 min open), else 600 s (init is untimed but bounded);
- stall: no training step and no evaluation finished for `budget.watchdog_s` seconds, by default
  max(60 s, a quarter of `budget.max_train_s`);
- whole run: `budget.max_train_s` plus one stall window past run_start (the loop checks the budget after
  every step, so a healthy run is never that late); a budget whose clock may be `own` (a CPU run on a busy host
  gets the time it waited for a CPU back, suite/measure/host_share.py) lasts up to WALL_CAP x max_train_s.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from suite.measure.host_share import WALL_CAP
from suite.spec import DEFAULT_MAX_INIT_S

if TYPE_CHECKING:
    from suite.harness import Run
    from suite.results.record import Result
    from suite.spec import Budget, WorkloadSpec

EXIT_TIMEOUT = 124  # what timeout(1) exits with: the parent reads the result, the code only says "watchdog"
MIN_STALL_S = 60.0


@dataclass(frozen=True)
class Limits:
    init_s: float  # the untimed init may take this long
    stall_s: float  # longest time without a finished step or evaluation
    run_s: float  # longest time from run_start to the end of the run
    stall_source: str  # which setting stall_s came from, for the message a user reads
    init_source: str = "budget.max_init_s"  # which rule init_s came from, for the message a user reads

    @classmethod
    def for_run(cls, spec: WorkloadSpec, division: str) -> Limits:
        """The limits of a run of `spec` that declares MLPerf `division` (its init window follows that rule)."""
        init_s, init_source = spec.init_limit(division)
        return dataclasses.replace(cls.for_budget(spec.budget), init_s=init_s, init_source=init_source)

    @classmethod
    def for_budget(cls, budget: Budget) -> Limits:
        if budget.watchdog_s is not None:
            stall, source = budget.watchdog_s, f"budget.watchdog_s={budget.watchdog_s:g}"
        else:
            stall = max(MIN_STALL_S, 0.25 * budget.max_train_s)
            source = f"default max({MIN_STALL_S:g} s, budget.max_train_s/4); set budget.watchdog_s to change it"
        init_s = budget.max_init_s if budget.max_init_s is not None else DEFAULT_MAX_INIT_S
        run_s = budget.max_train_s * (WALL_CAP if budget.clock != "wall" else 1.0)
        return cls(init_s=init_s, stall_s=stall, run_s=run_s + stall, stall_source=source)

    def worst_case_s(self) -> float:
        """The latest a watched run can end (its watchdog fires by then): the parent's backstop starts here."""
        return self.init_s + self.run_s


def main_thread_stack(limit: int = 8) -> str:
    """Where the main thread is right now (the hung call), innermost last."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    if frame is None:
        return "(main thread not found)"
    return "".join(traceback.format_stack(frame)[-limit:]).rstrip()


class Watchdog:
    """Watches one harness Run from a daemon thread; see the module docstring for the limits."""

    def __init__(
        self,
        run: Run,
        on_fire: Callable[[Result], Any],
        limits: Limits | None = None,
        poll_s: float | None = None,
        hard_exit: bool = True,
        exit_code: int = EXIT_TIMEOUT,
        heartbeat: str | None = None,
    ):
        self.run = run
        self.on_fire = on_fire
        self.limits = limits or Limits.for_run(run.spec, run.req.mlperf_division)
        self.poll_s = poll_s if poll_s is not None else min(0.5, self.limits.stall_s / 10)
        self.hard_exit = hard_exit
        self.exit_code = exit_code
        self.heartbeat = heartbeat  # touched every poll: a parent that sees it go stale knows this thread cannot run
        self.fired_reason: str | None = None
        self._lock = threading.Lock()
        self._disarmed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="trainbench-watchdog", daemon=True)
        self._started = 0.0
        self._progress: tuple[int, int] = (-1, -1)
        self._progress_at = 0.0

    def start(self) -> Watchdog:
        self._started = self._progress_at = time.perf_counter()
        self._thread.start()
        return self

    def disarm(self) -> bool:
        """Stop watching. True if the run ended first; False if the watchdog fired (it owns the ending)."""
        self._stop.set()
        if self._thread.is_alive():  # let a poll in progress finish, so no heartbeat is written after this
            self._thread.join(timeout=self.poll_s + 1.0)
        if self.heartbeat is not None:  # a rank that ended well is not a wedged one
            try:
                os.unlink(self.heartbeat)
            except OSError:
                pass
        if not self._lock.acquire(blocking=not self.hard_exit):
            return False  # the watchdog is recording the result and will end the process
        try:
            if self.fired_reason is not None:
                return False
            self._disarmed = True
            return True
        finally:
            self._lock.release()

    # ---- the thread ----------------------------------------------------------------------------------

    def _beat(self) -> None:
        if self.heartbeat is not None:
            try:
                with open(self.heartbeat, "a"):
                    os.utime(self.heartbeat)
            except OSError:
                pass

    def _loop(self) -> None:
        self._beat()
        while not self._stop.wait(self.poll_s):
            self._beat()
            reason = self.check(time.perf_counter())
            if reason is not None:
                self._fire(reason)
                return

    def check(self, now: float) -> str | None:
        """The reason to stop the run now, or None while it is healthy."""
        run, lim = self.run, self.limits
        t0 = run.t0
        if t0 is None:
            if now - self._started > lim.init_s:
                return f"timeout: init still running after {now - self._started:.1f} s (limit {lim.init_s:g} s: {lim.init_source})"
            return None
        progress = (run.steps, len(run.curve))
        if progress != self._progress:
            self._progress, self._progress_at = progress, now
        quiet_s = now - max(self._progress_at, t0)
        if quiet_s > lim.stall_s:
            return (f"timeout: no training step or evaluation finished for {quiet_s:.1f} s "
                    f"({lim.stall_source}); stopped at step {run.steps}")
        if now - t0 > lim.run_s:
            return (f"timeout: the run is still going {now - t0:.1f} s after run_start, past its budget "
                    f"(budget.max_train_s, x{WALL_CAP:g} when its clock may be own) plus one watchdog window ({lim.run_s:g} s); stopped at step {run.steps}")
        return None

    def _fire(self, reason: str) -> None:
        with self._lock:
            if self._disarmed:
                return
            self.fired_reason = reason
            run = self.run
            try:
                if run.flag.signum is not None:  # asked to stop, but the step in progress never finished
                    run.status = "interrupted"
                    reason = f"interrupted by signal {run.flag.signum}; {reason}"
                else:
                    run.status = "error"
                run.error = f"{reason}\nwhere the run was when the watchdog stopped it:\n{main_thread_stack()}"
                if run.t0 is not None:
                    run.total_s = time.perf_counter() - run.t0
                    run.train_s = run.total_s - run.eval_s
                sys.stderr.write(f"trainbench watchdog: {reason}\n")
                sys.stderr.flush()
                self.on_fire(run.result())
            except BaseException as e:  # noqa: BLE001 - the process must still end; the parent records it
                sys.stderr.write(f"trainbench watchdog: could not record the result: {type(e).__name__}: {e}\n")
            finally:
                sys.stderr.flush()
                if self.hard_exit:
                    os._exit(self.exit_code)  # the main thread is stuck where Python cannot reach it

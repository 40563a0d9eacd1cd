"""Injected faults, declared by a spec's `faults` block (suite/spec/schema.py FaultSpec): the harness calls them at fixed
points of the timed loop, so a fault scenario runs the same way on every backend.

- a loader stall: the batch iterator sleeps before the batch the spec names (and every `stall_every` after);
  the harness's data-wait timer around `next()` sees it as a wait for data;
- a slow rank: after each of its steps, rank `slow_rank` sleeps `slow_percent`% of that step's own time (or, with
  `slow_at: before_step`, that share of its previous step's own time before the step: before its gradient all-reduce);
- a killed rank: rank `kill_rank` sends itself SIGKILL once it has finished step `kill_at_step` (what a failed
  node looks like to its peers: no exception, no goodbye). Only on a job's first attempt
  (TORCHELASTIC_RESTART_COUNT and SLURM_RESTART_COUNT 0), so the restarted job runs through.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

from suite.spec import FaultSpec

RESTART_ENV = "TORCHELASTIC_RESTART_COUNT"  # set by torchrun's elastic agent: 0 on the first attempt
SLURM_RESTART_ENV = "SLURM_RESTART_COUNT"  # set by Slurm in a requeued job: 1 on its first rerun


def _count(name: str) -> int:
    try:
        return int(os.environ.get(name) or 0)
    except ValueError:
        return 0


def attempt() -> int:
    """Which attempt of the job this process is (0: the first): torchrun's restarts, plus Slurm's requeues of the
    job (SLURM_RESTART_COUNT, `--slurm requeue=true`)."""
    return _count(RESTART_ENV) + _count(SLURM_RESTART_ENV)


def restart_pending(status: str) -> bool:
    """A failed attempt that torchrun's elastic agent will restart (`--max-restarts` left): the next attempt, not
    this one, records the job's result. (A Slurm requeue: suite/execution/slurm_job.py requeue_pending.)"""
    left = _count("TORCHELASTIC_MAX_RESTARTS") - _count(RESTART_ENV)
    return status in ("error", "interrupted") and left > 0


class Faults:
    def __init__(self, spec: FaultSpec | None, rank: int):
        self.spec = spec or FaultSpec()
        self.rank = rank
        self.first_attempt = attempt() == 0
        self.stalled_s = 0.0  # what the stalls asked for (the test compares the measured data wait with it)
        self.kill = lambda: os.kill(os.getpid(), signal.SIGKILL)  # an in-process test raises instead
        self.last_step_s = 0.0  # slow_at before_step: the previous step's own time, less the sleep
        self.began = 0.0

    @property
    def active(self) -> bool:
        s = self.spec
        return bool(s.stall_loader_s or (s.slow_rank == self.rank and s.slow_percent)
                    or (s.kill_rank == self.rank and self.first_attempt))

    def batches(self, it: Iterator[Any]) -> Iterator[Any]:
        s = self.spec
        if not s.stall_loader_s:
            return it
        return self._stalled(it, s.stall_loader_s, s.stall_at_step, s.stall_every)

    def _stalled(self, it: Iterator[Any], seconds: float, first: int, every: int) -> Iterator[Any]:
        for n, batch in enumerate(it, start=1):
            if n == first or (every and n > first and (n - first) % every == 0):
                self.stalled_s += seconds
                time.sleep(seconds)
            yield batch

    def before_step(self) -> None:
        """Right before a training step on this rank: a rank slowed `before_step` pays its extra time here."""
        s = self.spec
        if s.slow_rank == self.rank and s.slow_percent and s.slow_at == "before_step":
            time.sleep(self.last_step_s * s.slow_percent / 100.0)
        self.began = time.perf_counter()

    def after_step(self, step_s: float) -> None:
        """Right after a training step on this rank: a slow rank pays its extra time here."""
        s = self.spec
        if s.slow_rank == self.rank and s.slow_percent:
            if s.slow_at == "before_step":
                self.last_step_s = time.perf_counter() - self.began
            else:
                time.sleep(step_s * s.slow_percent / 100.0)

    def end_of_step(self, step: int) -> None:
        """At the end of a step's iteration (its checkpoint, if any, saved): the kill, on the first attempt."""
        s = self.spec
        if s.kill_rank == self.rank and s.kill_at_step == step and self.first_attempt:
            self.kill()

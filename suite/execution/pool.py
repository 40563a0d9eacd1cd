"""`--executor inline` (one job) and `--executor local --jobs N`: isolated child processes on this machine.

Up to N runs at once, each in a child of its own (suite/execution/isolated.py), all driven from the driver's
main thread: it copies their output, watches their heartbeats and backstops, passes stop requests on, and
yields each Outcome as its child ends. Torch threads per run default to cores / (jobs x processes per run).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from suite.execution import forkserver
from suite.execution.isolated import IsolatedRun
from suite.execution.launch import Control, Options, Outcome, peak_cache_file
from suite.execution.processes import sweep_stale_jobs

if TYPE_CHECKING:
    from suite.harness import RunRequest

POLL_S = 0.1


def threads_per_job(jobs: int, cores: int | None = None, nproc: int = 1) -> int:
    from suite.devices import cpu_cores

    return max(1, (cores or cpu_cores()) // max(1, jobs * nproc))


class Pool:
    name = "pool"

    def __init__(self, options: Options, jobs: int = 1):
        if jobs < 1:
            raise ValueError(f"--jobs {jobs}: must be at least 1")
        self.options, self.jobs = options, jobs

    def run(self, requests: list[RunRequest], control: Control) -> Iterator[Outcome]:
        opts = self.options
        todo = list(requests)
        if self.jobs > 1:  # a lone run keeps the machine's default (its spec or --threads may say otherwise)
            todo = [r if r.threads else replace(r, threads=threads_per_job(self.jobs, nproc=opts.nproc))
                    for r in todo]
        todo.reverse()
        sweep_stale_jobs()
        if opts.warm:
            forkserver.context(forkserver.warm_modules(todo[0].backend if todo else "torch"))
        cache = peak_cache_file()
        running: list[IsolatedRun] = []
        try:
            while todo or running:
                while todo and len(running) < self.jobs and not control.stopping:
                    req = todo.pop()
                    running.append(IsolatedRun(req, nproc=opts.nproc, quiet=opts.quiet, warm=opts.warm,
                                               peak_cache=cache, torchrun_args=opts.torchrun_args).start())
                if control.stopping:
                    todo.clear()
                for run in running:  # pass each new stop request on (a third one kills)
                    while len(run.signals) < control.count:
                        run.stop(control.signum or signal.SIGTERM)
                finished = [run for run in running if run.poll()]
                for run in finished:
                    running.remove(run)
                    yield run.outcome()
                if not finished:
                    time.sleep(POLL_S)
        finally:
            for run in running:  # the driver itself is going away (an exception): leave nothing behind
                run.kill()
                while not run.poll():
                    time.sleep(POLL_S)
                run.outcome()
            try:
                os.unlink(cache)
            except OSError:
                pass

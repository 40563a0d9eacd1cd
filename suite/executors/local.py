"""`--executor local --jobs N`: seeds in N parallel processes on this machine, torch threads = cores / N."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace

from suite.executors import describe, error_result, run_worker
from suite.harness import RunRequest
from suite.results import Result


def threads_per_job(jobs: int, cores: int | None = None) -> int:
    from suite.devices import cpu_cores

    return max(1, (cores or cpu_cores()) // max(1, jobs))


def execute(requests: list[RunRequest], jobs: int) -> Iterator[Result]:
    if jobs < 1:
        raise ValueError(f"--jobs {jobs}: must be at least 1")
    todo = [r if r.threads else replace(r, threads=threads_per_job(jobs)) for r in requests]
    # spawn, not fork: a forked torch process inherits the parent's thread pools and locks
    ctx = mp.get_context("spawn")
    # one run per worker process (max_tasks_per_child=1): a run's memory and state never leak into the next
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(todo)) or 1, mp_context=ctx, max_tasks_per_child=1)
    try:
        pending: dict[Future, RunRequest] = {pool.submit(run_worker, r): r for r in todo}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                req = pending.pop(fut)
                try:
                    yield Result.model_validate_json(fut.result())
                except BrokenProcessPool as e:
                    yield error_result(req, f"worker process died: {describe(e)}")
                except Exception as e:  # noqa: BLE001 - a failed worker is recorded, never lost
                    yield error_result(req, f"worker failed: {describe(e)}")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)

"""Executors: where the (workload x backend x seed) runs of one `trainbench run` execute.

`inline` (the default) runs them one after another in this process; `local` fans seeds out to processes on
this machine; `ray` sends each run to a Ray cluster as a task. Every executor yields one Result per request,
in completion order, and a run that fails outside the harness (a crashed worker, a lost node) still yields
a Result with status `error`: nothing is lost.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from suite.harness import RunRequest
    from suite.results import Result

EXECUTORS = ("inline", "local", "ray")


def error_result(req: RunRequest, message: str) -> Result:
    """The record of a run that never reported back: status error, the reason, nothing measured."""
    from suite.harness import Run

    run = Run(replace(req, results_dir=None))
    run.status, run.error = "error", message[-4000:]
    return run.result()


def describe(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text[-4000:]


def run_worker(req: RunRequest) -> str:
    """What a worker does for one request: run it without writing; the driver writes. Returns Result JSON."""
    from suite import harness

    result, _ = harness.run(replace(req, results_dir=None))
    return result.model_dump_json()


def execute(requests: list[RunRequest], executor: str, jobs: int = 1, address: str | None = None,
            ) -> Iterator[Result]:
    """Run every request on `executor`, yielding each Result as it completes."""
    if executor == "local":
        from suite.executors import local

        yield from local.execute(requests, jobs)
    elif executor == "ray":
        from suite.executors import ray as ray_executor

        yield from ray_executor.execute(requests, address)
    else:
        raise ValueError(f"executor {executor!r}: expected one of {', '.join(EXECUTORS)}")

"""Executors: where the (workload x backend x seed) runs of one `trainbench run` execute.

`inline` (the default) runs them one after another in this process; `local` fans seeds out to processes on
this machine; `ray` sends each run to a Ray cluster as a task. Every executor yields one Result per request,
in completion order, and a run that fails outside the harness (a crashed worker, a lost node) still yields
a Result with status `error`: nothing is lost.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
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
    """What a worker does for one request: run it without writing; the driver writes (see `write`).

    Returns JSON holding the Result's JSON and the text of its :::MLLOG log."""
    from suite import harness

    the_run = harness.Run(replace(req, results_dir=None))
    result = the_run.execute()
    log = the_run.inst.mllog.text() if the_run.inst.mllog is not None else None
    return json.dumps({"result": result.model_dump_json(), "mllog": log})


def from_worker(payload: str) -> Result:
    """The Result a worker sent back, with its log's text kept for the driver to write beside it."""
    from suite.results import Result

    data = json.loads(payload)
    result = Result.model_validate_json(data["result"])
    result._mllog_text = data.get("mllog")
    return result


def write(results_dir: Path, result: Result) -> Path:
    """The driver's write: the result (atomic, append-only) and, when the worker sent one, its MLLOG log."""
    from suite.measure.instruments import Instruments
    from suite.results import write_atomic, write_result

    text = result._mllog_text
    result.mllog = Instruments.mllog_name(result) if text else None
    path = write_result(results_dir, result)
    if text and result.mllog:
        write_atomic(path.parent / result.mllog, text)
    return path


def execute(requests: list[RunRequest], executor: str, jobs: int = 1, address: str | None = None,
            ) -> Iterator[Result]:
    """Run every request on `executor`, yielding each Result as it completes."""
    if executor == "local":
        from suite.execution.launch import local

        yield from local.execute(requests, jobs)
    elif executor == "ray":
        from suite.execution.launch import ray as ray_executor

        yield from ray_executor.execute(requests, address)
    else:
        raise ValueError(f"executor {executor!r}: expected one of {', '.join(EXECUTORS)}")

"""`--executor inline --no-isolate`: each run in this very process, one after another (for a debugger).

The watchdog is armed as everywhere, but a run it has to end takes this process with it (it records the run
first): that is the price of running without a child process, and why isolation is the default. Also used
as each rank's body when the user launches `trainbench run` under their own torchrun.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from suite.execution.child import execute_guarded
from suite.execution.launch import Control, Options, Outcome
from suite.execution.progress import printer

if TYPE_CHECKING:
    from suite.harness import RunRequest


class InProcess:
    name = "inprocess"

    def __init__(self, options: Options, jobs: int = 1):
        self.options = options

    def run(self, requests: list[RunRequest], control: Control) -> Iterator[Outcome]:
        from suite import distributed
        from suite.data.base import DataMissing

        show = printer(distributed.from_env().is_main and not self.options.quiet)
        for req in requests:
            if control.stopping:
                return
            try:
                result, path = execute_guarded(req, show)
            except DataMissing as e:
                from suite.measure.environment import fingerprint
                from suite.results import dead_runs

                yield Outcome(dead_runs.error_result(req, "error", str(e), fingerprint()), None, None, str(e))
                return
            signalled = None
            if result.status == "interrupted":  # the harness caught the driver's own signal
                control.request_stop()
                signalled = control.signum
            yield Outcome(result, path, signalled)

"""The ONE seam where runs execute: a `Launcher` takes RunRequests and yields an `Outcome` per run.

| launcher   | `--executor`                | where each run executes                                           |
|------------|-----------------------------|-------------------------------------------------------------------|
| inprocess  | `inline --no-isolate`       | this process (a debugger); the watchdog is armed, a hang ends all |
| pool       | `inline` (1 job), `local`   | an isolated child process per run (suite/execution/isolated.py), |
|            |  (`--jobs N`)               | up to N at once on this machine                                   |
| ray        | `ray [--address A]`         | a Ray task per run, which runs the same isolated child on its node |
| slurm      | `slurm [--slurm K=V]`       | a Slurm batch job per run, which runs the same isolated child on  |
|            |                             | its node (suite/execution/slurm.py)                               |

Every launcher but `inprocess` runs each run through the same isolated child, with heartbeat and watchdog,
so a hang, crash, OOM, NaN, SIGTERM/SIGINT or the driver's death is handled identically. The driver's
SIGINT/SIGTERM (`Control.catch_signals`): no new run starts, in-flight runs are stopped and recorded
`interrupted`, finished ones are kept, and the launcher returns so that the summary is printed. A third
signal kills in-flight runs at once (their parent records them). `fail_fast`: after the first run that ends
in error or divergence, no new run starts and in-flight runs are stopped the same way.

Adding a launcher (Slurm, say) is one new module here with a class that has `name` and `run()`, and one
line in `LAUNCHERS`.
"""

from __future__ import annotations

import importlib
import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from suite.execution import processes

if TYPE_CHECKING:
    from suite.harness import RunRequest
    from suite.results.record import Result

EXECUTORS = ("inline", "local", "ray", "slurm")  # what `trainbench run --executor` accepts
LAUNCHERS = {"inprocess": "suite.execution.inprocess:InProcess", "pool": "suite.execution.pool:Pool",
             "ray": "suite.execution.ray:RayLauncher", "slurm": "suite.execution.slurm:SlurmLauncher"}
BAD = ("error", "diverged", "interrupted")


@dataclass
class Outcome:
    """What a launcher yields for one run: its record, where it was written, and how the run ended."""

    result: Result
    path: Path | None
    signalled: int | None = None  # the launcher was asked to stop (a signal, --fail-fast) during the run
    data_missing: str | None = None  # the data set is not installed (bad input, nothing recorded)
    returncode: int = 0
    write_error: str | None = None  # `cannot write result: <path>: <reason>`: the record exists only here
    recorded_by: str | None = None  # a multi-node run seen from node R > 0: node 0 writes its result


@dataclass
class Control:
    """What the driver asks of every run in flight: stop (a signal, --fail-fast), and how insistently."""

    fail_fast: bool = False
    count: int = 0  # stop requests so far; a launcher passes each one on to its runs
    signum: int | None = None  # the first signal the driver got (None: stopping for --fail-fast)
    failed: bool = False  # a run ended badly (under fail_fast: stop)

    @property
    def stopping(self) -> bool:
        return self.count > 0

    def request_stop(self, signum: int | None = None) -> None:
        if self.signum is None and signum is not None:
            self.signum = signum
        self.count += 1

    def note(self, outcome: Outcome) -> None:
        """A run finished: under fail_fast, a bad one stops the rest."""
        if outcome.result.status in ("error", "diverged"):
            self.failed = True
            if self.fail_fast and not self.stopping:
                self.request_stop()

    def _handler(self, signum: int, _frame: Any) -> None:
        self.request_stop(signum)

    def reclaim_signals(self) -> None:
        """Install our handlers again after a library took SIGINT/SIGTERM for itself (ray.init does)."""
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                signal.signal(s, self._handler)

    @contextmanager
    def catch_signals(self) -> Iterator[Control]:
        """SIGINT/SIGTERM to the driver become stop requests (main thread only; elsewhere nothing changes)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for s, h in old.items():
                signal.signal(s, h)


@dataclass
class Options:
    """How to launch: the CLI's --executor, --jobs, --address, --nproc, --quiet, --isolate."""

    executor: str = "inline"
    jobs: int = 1
    address: str | None = None
    nproc: int = 1
    quiet: bool = False
    isolate: bool = True
    # fork single-process children from a warm fork server ($TRAINBENCH_COLD_START=1: a fresh interpreter each,
    # as before the fork server; benchmarks/smoke_startup.py compares the two)
    warm: bool = field(default_factory=lambda: os.environ.get("TRAINBENCH_COLD_START", "") != "1")
    torchrun_args: list[str] = field(default_factory=lambda: ["--standalone"])
    slurm: list[str] = field(default_factory=list)  # --slurm KEY=VALUE / FILE.yaml (suite/execution/slurm_job.py)
    nnodes: int = 1  # --executor slurm: nodes per run (Slurm places them; elsewhere torchrun_args say it)


class Launcher(Protocol):
    name: str

    def run(self, requests: list[RunRequest], control: Control) -> Iterator[Outcome]:
        """Execute every request (or stop early when control says so), yielding each Outcome as it ends."""
        ...


def check(options: Options) -> None:
    """Refuse options no launcher takes (ValueError, naming the flag), without importing any launcher."""
    if options.executor not in EXECUTORS:
        raise ValueError(f"--executor {options.executor!r}: expected one of {', '.join(EXECUTORS)}")
    if options.address and options.executor != "ray":
        raise ValueError("--address is for --executor ray")
    if options.slurm and options.executor != "slurm":
        raise ValueError("--slurm is for --executor slurm")
    if options.executor == "slurm" and options.jobs > 1:
        raise ValueError("--jobs is for --executor local: Slurm runs as many jobs at once as the partition allows "
                         "(limit them with the partition, or --slurm sbatch=... )")
    if not options.isolate and options.executor != "inline":
        raise ValueError("--no-isolate runs in this process: it is for --executor inline only")
    if options.torchrun_args != ["--standalone"] and (options.executor == "ray" or options.jobs > 1):
        raise ValueError("--nnodes: every node of a multi-node run starts its ranks with torchrun, one run at a "
                         "time, at the one --rdzv-endpoint: use --executor inline (the default) without --jobs")


def check_script_path(path: Path, flag: str) -> None:
    """`--executor slurm`: a folder whose path cannot go into a batch script is bad input (exit 2)."""
    from suite.execution import slurm_job

    slurm_job.script_path(Path(path).absolute(), flag)


def check_requeue(options: Options, specs: list[tuple[Path, Any]]) -> None:
    """`--slurm requeue=true`: a requeued job resumes from its last checkpoint, so every run must save them (exit 2)."""
    from suite.execution import slurm_job

    if options.executor != "slurm" or not slurm_job.parse(options.slurm).requeue:
        return
    missing = [p.spec.name for _, p in specs if p.spec.checkpoint is None]
    if missing:
        raise ValueError(f"--slurm requeue=true: {', '.join(missing)} saves no checkpoints, so a requeued job would "
                         "start over; add --checkpoint-every N (steps) or Ns (seconds)")


def launcher_for(options: Options) -> Launcher:
    """The launcher `--executor` names (inline: a pool of one; inline --no-isolate: this process)."""
    check(options)
    module, _, attr = LAUNCHERS[_launcher_name(options)].partition(":")
    jobs = options.jobs if options.executor == "local" else 1
    return getattr(importlib.import_module(module), attr)(options, jobs=jobs)


def _launcher_name(options: Options) -> str:
    return {"inline": "pool" if options.isolate else "inprocess", "local": "pool", "ray": "ray",
            "slurm": "slurm"}[options.executor]


def prewarm(backend: str, options: Options) -> bool:
    """Start the fork server now when the runs will be forked from it (the pool, warm, one process a run): it
    imports torch and the suite while the driver reads the specs. True when it started one."""
    check(options)
    single = options.nproc == 1 and options.torchrun_args == ["--standalone"]  # else torchrun starts the ranks
    if _launcher_name(options) == "pool" and options.warm and single:
        from suite.execution import forkserver

        forkserver.context(forkserver.warm_modules(backend), start=True)
        return True
    return False


def launch(requests: list[RunRequest], options: Options, control: Control | None = None) -> Iterator[Outcome]:
    """Run every request on the launcher the options name, with the driver's signals as stop requests."""
    control = control or Control()
    launcher = launcher_for(options)
    with control.catch_signals():
        for outcome in launcher.run(requests, control):
            control.note(outcome)
            yield outcome


def peak_cache_file() -> str:
    """A per-invocation file the runs share their measured GEMM peaks through (host, dtype, threads). Its name
    carries this driver's pid and start time; the files of drivers that are gone (killed before they could
    remove theirs) are removed first."""
    processes.sweep_stale_peak_caches()
    pid = os.getpid()
    prefix = f"{processes.PEAKS_PREFIX}{pid}-{processes.process_start_time(pid)}-"
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".json")
    os.close(fd)
    Path(path).write_text("{}")
    return path

"""The loop's contract: stop codes, the progress line, and the `Sink` every driver of a run's steps writes into.

A driver (the harness's own loop, the throughput loop, a trainer of its own such as veRL's) reads the run's spec and
stop flag from the sink and writes its figures through it: steps and their times, evaluations, the clock's start and
stop, the target reached, the ending. `suite.harness.Run` is the sink; `suite.loop.figures.Figures` holds its figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from suite.devices import Device
    from suite.distributed import DistInfo
    from suite.measure.goodput import Account
    from suite.measure.instruments import Instruments
    from suite.results.record import EvalPoint
    from suite.spec import WorkloadSpec

# stop codes, ordered so that all_max picks the most severe one when ranks disagree
CONTINUE, REACHED, BUDGET, DIVERGED, INTERRUPTED = 0, 1, 2, 3, 4
STATUS_OF = {REACHED: "reached", BUDGET: "budget", DIVERGED: "diverged", INTERRUPTED: "interrupted"}


@dataclass
class Progress:
    """What a live progress line shows. `event` is one of: init, step, eval, stop."""

    event: str
    workload: str
    seed: int
    step: int = 0
    elapsed_s: float = 0.0
    loss: float | None = None
    metric: float | None = None
    target: float | None = None
    status: str | None = None


ProgressFn = Callable[[Progress], None]


class StopSignal(Protocol):
    """Set when the run must stop: the signal's number, or a reason when it was not a signal the user sent."""

    signum: int | None
    reason: str | None


class Sink(Protocol):
    """What a driver reads from the run and writes its figures into (suite.harness.Run implements it)."""

    # the run, read only
    spec: WorkloadSpec
    dist: DistInfo
    device: Device
    inst: Instruments
    account: Account
    progress: ProgressFn
    seed: int
    mode: str  # tta | throughput
    mlperf_division: str
    extra_config: dict[str, Any]  # recorded in Result.config (a trainer's own command line)

    @property
    def flag(self) -> StopSignal: ...  # read only: the harness's signal handlers and watchdog set it

    # the figures, written by the driver
    init_s: float
    eval_s: float
    train_s: float
    total_s: float
    t0: float | None
    steps: int
    samples: int
    step_times: list[float]
    step_cpu_times: list[float]
    last_loss: float | None
    curve: list[EvalPoint]
    memory: dict[str, Any]
    reported: dict[str, Any]  # Result fields a trainer of its own measured (veRL's phases)
    status: str
    error: str | None

    def add_init(self, seconds: float) -> None: ...
    def start_clock(self, lap: str | None = None) -> float: ...
    def count_step(self, steps: int | None = None) -> None: ...
    def step_progress(self, elapsed_s: float) -> Progress: ...
    def record_eval(self, elapsed_s: float, scores: dict[str, float], may_count: bool = True) -> bool: ...
    def reach_target(self, elapsed_s: float) -> None: ...
    def stop_clock(self, t_end: float, train_s: float | None = None) -> None: ...
    def end(self, code: int) -> None: ...

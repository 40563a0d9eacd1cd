"""The figures of one run as its loop writes them (the `Sink`'s writable half; suite.harness.Run is a Figures): the
clock (init, run_start, stop), the step counts and times, the losses read, the evaluation curve, and time to target.

Time to target is set here and nowhere else (`reach_target`): the harness's loop and a trainer of its own (veRL's)
both call it at the evaluation that meets the target, with the time on the run's clock.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Protocol

from suite.loop.contract import (
    BUDGET,
    CONTINUE,
    DIVERGED,
    INTERRUPTED,
    STATUS_OF,
    Progress,
    ProgressFn,
    StopSignal,
)
from suite.measure import mllog
from suite.results.record import EvalPoint

if TYPE_CHECKING:
    from suite.measure.goodput import Account
    from suite.measure.instruments import Instruments
    from suite.spec import WorkloadSpec


class BudgetClock(Protocol):
    """Whether the budget's max_train_s is spent (a CPU run's own clock on a busy host; the wall otherwise)."""

    def spent(self, elapsed_s: float, now: float) -> bool: ...


class Figures:
    """What a run measured, filled as the run goes so that any ending (an error, the watchdog) reports it."""

    spec: WorkloadSpec
    inst: Instruments
    account: Account
    progress: ProgressFn
    flag: StopSignal
    seed: int
    mlperf_division: str
    host: BudgetClock | None = None  # the budget's clock where it is not the wall (suite/measure/host_share.py)

    def init_figures(self) -> None:
        self.t0: float | None = None  # perf_counter at run_start; suite/execution/watchdog.py measures stalls from it
        self.init_s = self.train_s = self.eval_s = self.total_s = self.data_wait_s = 0.0
        self.steps = self.samples = 0
        self.step_times: list[float] = []
        self.step_cpu_times: list[float] = []  # throughput mode with `clock: cpu`: the process's CPU time per step
        self.losses: list[float] = []  # every loss read (on CPU: every step), the resume checks compare them
        self.last_loss: float | None = None
        self.diverged_step: int | None = None
        self.curve: list[EvalPoint] = []
        self.time_to_target_s: float | None = None
        self.steps_to_target: int | None = None
        self.samples_to_target: int | None = None
        self.clock: dict[str, Any] = {}  # MLPerf's init record (mllog.clock_record)
        self.memory: dict[str, Any] = {}
        self.reported: dict[str, Any] = {}  # Result fields a trainer of its own measured (veRL's phases)
        self.status = "error"
        self.error: str | None = None

    # ---- the clock ----------------------------------------------------------------------------------------------

    def add_init(self, seconds: float) -> None:
        """Untimed init time (the harness's setup; a trainer's own start-up added to it), and MLPerf's init record."""
        self.init_s += seconds
        self.clock = mllog.clock_record(self.init_s, self.inst.data_staging_s, self.mlperf_division,
                                        self.spec.init_limit(self.mlperf_division))

    def start_clock(self, lap: str | None = None) -> float:
        """run_start: the instruments start, and the clock's zero (perf_counter) is returned; `lap` closes that part
        of the wall-clock account. The driver sets `t0` once its loop begins (the watchdog then watches for stalls)."""
        self.inst.run_start()
        t0 = time.perf_counter()
        if lap is not None:
            self.account.lap(lap, t0)
        return t0

    def stop_clock(self, t_end: float, train_s: float | None = None) -> None:
        """run_stop: the run's time from t0, its train-only time (the whole minus evaluations unless given). The
        driver then calls `inst.clock_stopped()` (MLLOG's run_stop, the energy meter) where its ending allows."""
        assert self.t0 is not None, "stop_clock before the clock started"
        self.total_s = t_end - self.t0
        self.train_s = self.total_s - self.eval_s if train_s is None else train_s

    # ---- steps ------------------------------------------------------------------------------------------------

    def count_step(self, steps: int | None = None) -> None:
        """One more optimizer step (or, from a trainer that counts its own, the steps so far) and its samples."""
        batch = self.spec.data.batch_size
        if steps is None:
            self.steps += 1
            self.samples += batch
        else:
            self.steps, self.samples = steps, steps * batch

    def read_loss(self, step: int, loss: Any) -> int:
        """Read one step's loss (on an accelerator, a host-device sync): DIVERGED when it is not finite."""
        self.last_loss = float(loss)
        self.losses.append(self.last_loss)
        if math.isfinite(self.last_loss):
            return CONTINUE
        self.diverged_step = step
        return DIVERGED

    def stop_rule(self, now: float) -> int:
        """After a step that did not reach the target: INTERRUPTED on a stop signal, else BUDGET past
        budget.max_train_s on the clock or at budget.max_steps, else CONTINUE."""
        assert self.t0 is not None, "stop_rule before the clock started"
        budget = self.spec.budget
        if self.flag.signum is not None:
            return INTERRUPTED
        spent = self.host.spent(now - self.t0, now) if self.host is not None else now - self.t0 >= budget.max_train_s
        if spent or (budget.max_steps and self.steps >= budget.max_steps):
            return BUDGET
        return CONTINUE

    def step_progress(self, elapsed_s: float) -> Progress:
        """The progress line of the step just finished."""
        return Progress("step", self.spec.name, self.seed, self.steps, elapsed_s, self.last_loss)

    # ---- evaluations and the target --------------------------------------------------------------------------

    def record_eval(self, elapsed_s: float, scores: dict[str, float], may_count: bool = True) -> bool:
        """One evaluation on the clock (`elapsed_s` since t0): a point of the curve, the progress line, MLLOG's
        eval_stop. True when it meets the target (and `may_count`: a compression method still converging cannot)."""
        spec = self.spec
        self.curve.append(EvalPoint(step=self.steps, samples=self.samples, elapsed_s=elapsed_s,
                                    train_s=elapsed_s - self.eval_s, metrics={k: float(v) for k, v in scores.items()}))
        self.progress(Progress("eval", spec.name, self.seed, self.steps, elapsed_s, self.last_loss,
                               scores.get(spec.target.metric), spec.target.value))
        met = spec.target.met(scores) and bool(may_count)
        self.inst.eval_end(self.steps, self.samples, spec.target.metric, scores, met)
        return met

    def reach_target(self, elapsed_s: float, at_start: bool = False) -> None:
        """THE place time to target is set: the time on the run's clock, and the steps and samples it took.
        `at_start`: met by the evaluation before the first step (no steps, nothing for the energy meter to mark)."""
        self.time_to_target_s = elapsed_s
        if at_start:
            self.steps_to_target, self.samples_to_target = 0, 0
            return
        self.inst.target_reached()
        self.steps_to_target, self.samples_to_target = self.steps, self.samples

    def end(self, code: int) -> None:
        self.status = STATUS_OF[code]

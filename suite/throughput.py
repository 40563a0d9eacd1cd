"""Throughput mode (`trainbench run --mode throughput`): the step loop that the A/B gate measures.

After the harness's untimed init: `warmup_steps` untimed steps, then `measure_steps` steps each timed on its
own (device events on accelerators; on CPU perf_counter after a synchronize on both sides of the step, or with
`throughput.clock: cpu` the process's CPU time, which leaves out the waits for a core on a shared runner). No
evaluation, no target, no budget stop: the run ends `measured` after its steps (or `interrupted` on a signal,
`diverged` on a non-finite loss). Every measured step's time goes into the result (`step_times_s`), because
compare's confidence interval resamples steps within runs (docs/compare.md). The loop writes its figures into the
run through the loop's `Sink` (suite/loop/contract.py), as every driver does.

May import: `suite.loop`, `suite.distributed`, `suite.backends.base`, `suite.workloads.contract`. Never:
`suite.harness`, `suite.execution`, `suite.results`.
"""

from __future__ import annotations

import math
import os
import select
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from suite import distributed
from suite.loop.contract import CONTINUE, DIVERGED, INTERRUPTED, Sink

if TYPE_CHECKING:
    from suite.backends.base import Backend, StepOut
    from suite.workloads.contract import Workload

TURN_ENV = "TRAINBENCH_AB_TURN"  # "IN_FIFO:OUT_FIFO", set by `trainbench ab --lockstep` (suite/compare/ab.py)
TURN_WAIT_S = 120.0  # the other side is gone (or measures fewer steps): stop waiting, run free


class Turns:
    """Lockstep with the other side of an A/B: wait for the token before each step, pass it on after.

    Two processes (base and head) then alternate step by step, A B A B ..., so a neighbour's burst or a clock
    change hits both sides' steps alike. Without the variable (a plain run) every call is a no-op.
    """

    def __init__(self, spec: str | None):
        self.fds: tuple[int, int] | None = None
        # poll, not select: select refuses a descriptor >= 1024 (FD_SETSIZE), which a long-lived process (a Ray
        # worker, a test runner) reaches; the token wait would then crash the run
        self.poller = select.poll()
        if spec:
            inp, out = spec.split(":", 1)
            # O_RDWR: opening a FIFO this way never blocks (two processes opening for read would deadlock)
            self.fds = (os.open(inp, os.O_RDWR), os.open(out, os.O_RDWR))
            self.poller.register(self.fds[0], select.POLLIN)

    def wait(self) -> None:
        if self.fds is None:
            return
        if not self.poller.poll(TURN_WAIT_S * 1000):
            self.close()  # the other side ended or hangs: measure on alone rather than hang
            return
        os.read(self.fds[0], 1)

    def done(self) -> None:
        if self.fds is not None:
            os.write(self.fds[1], b"t")

    def close(self) -> None:
        if self.fds is not None:
            self.poller.unregister(self.fds[0])
            for fd in self.fds:
                os.close(fd)
            self.fds = None


def measure(run: Sink, workload: Workload, backend: Backend, state: Any) -> None:
    """Fill `run` (a harness.Run after init) with the measured steps and its status."""
    spec = run.spec
    warmup, measure_steps = spec.throughput.warmup_steps, spec.throughput.measure_steps
    if spec.throughput.clock == "cpu" and run.device.type != "cpu":
        raise ValueError(f"throughput.clock cpu: only on a cpu device (this run is on {run.device.type}, where "
                         "device events time the steps); use throughput.clock=wall")
    shard = backend.data_shard()  # a backend with model parallelism names the shard this rank reads
    data_rank, data_world = shard if shard is not None else (run.dist.rank, run.dist.world)
    batches = iter(workload.train_batches(data_rank, data_world))
    world = run.dist.world
    turns = Turns(os.environ.get(TURN_ENV) if run.dist.rank == 0 else None)

    def step() -> StepOut:
        return backend.train_step(state, next(batches))

    def stop_code(out: StepOut) -> int:
        c = CONTINUE
        run.last_loss = float(out.loss)
        if not math.isfinite(run.last_loss):
            c = DIVERGED
        elif run.flag.signum is not None:
            c = INTERRUPTED
        return distributed.all_max(c) if world > 1 else c

    try:
        code = _loop(run, spec, warmup, measure_steps, step, stop_code, backend, turns)
    finally:
        turns.close()
    run.status = {CONTINUE: "measured", DIVERGED: "diverged", INTERRUPTED: "interrupted"}[code]
    if code == DIVERGED:
        run.error = f"non-finite loss {run.last_loss} at step {run.steps}"
    if code == INTERRUPTED:
        run.error = "stopped by a signal"


def _loop(run: Sink, spec: Any, warmup: int, measure_steps: int, step: Callable[[], StepOut],
          stop_code: Callable[[StepOut], int], backend: Backend, turns: Turns) -> int:
    code = CONTINUE
    # cpu: the CPU time of this process (all its threads) per step goes into the result's step times
    # (run.step_cpu_times); the wall times stay in run.step_times for train_s, samples/s and MFU
    cpu_clock = spec.throughput.clock == "cpu"
    for _ in range(warmup):  # untimed: caches, the allocator, lazy init and compilation settle here
        turns.wait()
        out = step()
        backend.synchronize()
        turns.done()
        code = stop_code(out)
        if code != CONTINUE:
            break
    backend.synchronize()
    t0 = run.start_clock(lap="compile_s")  # the lap: the untimed warm-up steps, compilation and caches settling
    run.t0 = t0
    next_progress = t0 + 1.0
    while code == CONTINUE and run.steps < measure_steps:
        turns.wait()  # lockstep with the other side of an A/B (a no-op otherwise), outside the timed window
        backend.synchronize()
        cs = time.process_time()
        ts = time.perf_counter()
        run.inst.step_begin()
        out = step()
        run.inst.step_end()
        backend.synchronize()
        run.step_times.append(time.perf_counter() - ts)
        if cpu_clock:
            run.step_cpu_times.append(time.process_time() - cs)
        turns.done()
        run.count_step()
        code = stop_code(out)  # outside the timed window: the loss read and the agreement across ranks
        now = time.perf_counter()
        if now >= next_progress:
            next_progress = now + 1.0
            run.progress(run.step_progress(now - t0))
    backend.synchronize()
    t_end = time.perf_counter()
    # train_s: the measured steps only (in lockstep the wall clock holds waits)
    run.stop_clock(t_end, train_s=math.fsum(run.step_times))
    run.account.add("steps_s", run.train_s)  # the timed steps; lockstep waits and loss reads are other_s
    run.account.lap("other_s", t_end)
    run.account.parts["other_s"] -= run.train_s
    run.inst.clock_stopped()
    run.memory = run.device.memory_stats()
    return code


def compact(times_s: list[float]) -> list[float]:
    """Step times rounded to 0.1 µs: far below any timer's resolution, a third of the JSON."""
    return [round(t, 7) for t in times_s]


def compact_steps(the_run: Sink) -> list[float]:
    """A throughput run's step times for its result, compacted: the CPU clock's when the run timed on it (`clock cpu`),
    else the device's events where the device has them (the step's device time), else the host's synced timings."""
    if cpu_times := the_run.step_cpu_times:
        return compact(cpu_times)
    try:
        device_times = the_run.inst.timer.device_times_s()
    except Exception:  # noqa: BLE001 - result_fields reports the unreadable timers
        device_times = []
    return compact(device_times or the_run.step_times)

"""The timed loop of one run, under MLPerf's clock rules, and the Result it produces.

init (untimed, bounded) -> run_start: the clock starts before the first batch is touched and is never
paused -> train steps, with evaluations on the clock at the spec's cadence -> run_stop at the first
evaluation that meets the target (`reached`), at the budget (`budget`), on a non-finite loss (`diverged`),
on SIGINT/SIGTERM (`interrupted`), or on an exception (`error`). Train-only time is kept beside.
Every rank runs this loop; stop decisions are agreed across ranks; only rank 0 writes the result.
"""

from __future__ import annotations

import math
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suite import devices, distributed, registry, throughput
from suite.backends.base import RunOptions
from suite.data.base import DataMissing
from suite.data.locate import data_root
from suite.data.synthetic import files as synthetic
from suite.execution import faults, ranks, recovery
from suite.execution.endings import OOM_HINT, StopFlag, out_of_memory, short_traceback, signals_to_flag
from suite.measure import bandwidth, environment, goodput, mllog, pauses
from suite.measure.instruments import Instruments
from suite.measure.profiling import ProfileWindow
from suite.results.record import EvalPoint, Result, new_run_id, now_utc, write_run
from suite.spec import WorkloadSpec
from suite.workloads.contract import Context, side_files

# stop codes, ordered so that all_max picks the most severe one when ranks disagree
CONTINUE, REACHED, BUDGET, DIVERGED, INTERRUPTED = 0, 1, 2, 3, 4
STATUS_OF = {REACHED: "reached", BUDGET: "budget", DIVERGED: "diverged", INTERRUPTED: "interrupted"}


@dataclass
class RunRequest:
    spec: WorkloadSpec
    backend: str = "torch"
    seed: int = 0
    precision: str = "fp32"
    compile: bool = False
    threads: int | None = None
    results_dir: Path | None = Path("results")
    tier: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    variant: str | None = None
    spec_source: str = ""
    extra_config: dict[str, Any] = field(default_factory=dict)
    peak_tflops: float | None = None  # overrides the peak table; the result says so
    profile_dir: Path | None = None  # set: write a torch.profiler trace of a window of steps here
    profile_window: ProfileWindow | None = None
    nvtx: bool = False  # NVTX ranges on CUDA (implied by profile_dir)
    measure_peak: bool = True  # the GEMM benchmark at run start
    attention_flops: str = "full"  # MFU's attention convention: full (PaLM) | causal (half); the other beside
    mlperf_org: str | None = None  # MLLOG submission_org
    mlperf_division: str = "open"  # MLLOG submission_division; sets MLPerf's init limit (closed 30, open 240 min)
    mode: str = "tta"  # tta | throughput (suite/throughput.py: timed steps only, no evaluation, status measured)
    checkpoint_dir: Path | None = None  # where checkpoints go (default: resume.default_root(run id))


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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class Run:
    """One seed of one workload under one backend, on this rank."""

    def __init__(self, req: RunRequest, progress: ProgressFn | None = None):
        # the wall-clock account starts first: everything after this line is on it (suite/measure/goodput.py)
        self.account = goodput.Account(launched=os.environ.get("TRAINBENCH_LAUNCHED") == "1")
        self.req = req
        self.spec = req.spec
        self.progress = progress or (lambda p: None)
        self.dist = distributed.from_env()
        self.faults = faults.Faults(req.spec.faults, self.dist.rank)
        self.device = devices.current(self.dist.local_rank)
        self.run_id = new_run_id()
        self.started_at = now_utc()
        self.flag = StopFlag()
        self.t0: float | None = None  # perf_counter at run_start; suite/execution/watchdog.py measures stalls from it
        # measurements, filled as the run goes so that any ending (error included) reports them
        self.init_s = self.train_s = self.eval_s = self.total_s = self.data_wait_s = 0.0
        self.steps = self.samples = 0
        self.step_times: list[float] = []
        self.losses: list[float] = []  # every loss read (on CPU: every step), the resume checks compare them
        self.agree_wait_s: list[float] = []  # per step, this rank's wait at the stop agreement
        self.rank_summary: list[dict[str, Any]] = []  # every rank's steps (rank 0, several ranks)
        self.train_state: Any = None
        self.job = recovery.JobState()  # checkpoints, restarts, the job's clock
        self.curve: list[EvalPoint] = []
        self.warnings: list[str] = []
        self.time_to_target_s: float | None = None
        self.steps_to_target: int | None = None
        self.samples_to_target: int | None = None
        self.status = "error"
        self.error: str | None = None
        self.last_loss: float | None = None
        self.flops_per_sample: float | None = None
        self.tokens_per_sample = 1
        self.memory: dict[str, Any] = {}
        self.reported: dict[str, Any] = {}  # Result fields a trainer of its own measured (veRL's phases)
        self.backend: Any = None
        self.inst = Instruments(workload=req.spec.name, seed=req.seed, dist=self.dist,
                                precision=req.precision, peak_tflops=req.peak_tflops, profile_dir=req.profile_dir,
                                profile_window=req.profile_window, nvtx=req.nvtx, run_id=self.run_id,
                                measure_peak=req.measure_peak, attention_flops=req.attention_flops, device=self.device,
                                mlperf_org=req.mlperf_org, mlperf_division=req.mlperf_division,
                                config_filename=Path(req.spec_source).name if req.spec_source else "",
                                mlperf_benchmark=req.spec.mlperf_benchmark)
        self.clock: dict[str, Any] = {}
        self.diverged_step: int | None = None
        # (k, late): every k-th step's loss is read; late: only after the next step is queued. On CPU a read is
        # free: every step, at once. On an accelerator a read waits for the device: every 10th, late, so the
        # device has the next step to run while the host waits and never idles for the read (issue 29)
        self.loss_check = (1, False) if self.device.type == "cpu" else (10, True)

    def _read_loss(self, step: int, loss: Any) -> int:
        """Read one step's loss (on an accelerator, a host-device sync): DIVERGED when it is not finite."""
        self.last_loss = float(loss)
        self.losses.append(self.last_loss)
        if math.isfinite(self.last_loss):
            return CONTINUE
        self.diverged_step = step
        return DIVERGED

    def step_progress(self, elapsed_s: float) -> Progress:
        """The progress line of the step just finished (the throughput loop reports through it too)."""
        return Progress("step", self.spec.name, self.req.seed, self.steps, elapsed_s, self.last_loss)

    # ---- the flow --------------------------------------------------------------------------------------

    def execute(self) -> Result:
        spec = self.spec
        with signals_to_flag(self.flag):
            try:
                self._run()
            except DataMissing:
                raise  # bad input, not a failed run: the CLI says how to get the data, nothing is recorded
            except KeyboardInterrupt:
                self.status, self.error = "interrupted", "interrupted by a second signal"
            except (Exception, SystemExit) as e:  # noqa: BLE001 - every failure is recorded, never lost
                self.status = "error"
                self.error = f"{type(e).__name__}: {e}\n{short_traceback(e)}"
                if out_of_memory(e):
                    self.error = f"out of memory ({OOM_HINT}): {self.error}"
            finally:
                if self.backend is not None:
                    try:
                        self.backend.close()
                    except Exception:  # noqa: BLE001
                        pass
        self.inst.finish(self.status, self.steps, self.samples)
        result = self.result()
        self.progress(Progress("stop", spec.name, self.req.seed, self.steps, self.total_s, status=self.status))
        return result

    def _run(self) -> None:
        spec, req = self.spec, self.req
        t_init = time.perf_counter()
        self.progress(Progress("init", spec.name, req.seed))
        self.inst.init_start()
        devices.set_threads(req.threads, self.dist.local_world)
        self.device.set_current()
        distributed.init(self.dist, self.device)
        self.run_id = distributed.from_main(self.run_id)  # one run, one id, on every node
        seed_everything(req.seed)
        task_cls = registry.task_class(spec.task)
        t_data = time.perf_counter()  # constructing the workload reads, normalises and moves its data set
        workload = task_cls(spec, Context(data_root=data_root(), seed=req.seed, device=self.device.torch))
        self.inst.data_staging_s = time.perf_counter() - t_data
        backend_cls = registry.backend_class(req.backend)
        self.backend = backend = backend_cls(self.device)
        avail = backend.available()
        if not avail.ok:
            raise RuntimeError(f"backend {req.backend!r} is not available here: {avail.reason}")
        opts = RunOptions(precision=req.precision, compile=req.compile, options=spec.backends.get(req.backend, {}))
        state = self.train_state = backend.setup(workload, opts)
        workload.attach(backend.eval_model(state))
        self.flops_per_sample = self.inst.model_flops_per_sample(workload, float(workload.flops_per_sample()))
        self.bytes_source = workload  # recommenders: bytes moved per sample (suite/measure/bandwidth.py)
        self.tokens_per_sample = int(workload.tokens_per_sample())
        self.inst.setup(spec=spec, backend=backend, state=state, workload=workload,
                        platform=environment.hardware(self.device, self.dist.world).slug)
        self.device.reset_peak_memory()
        backend.synchronize()
        self.init_s = time.perf_counter() - t_init
        self.clock = mllog.clock_record(self.init_s, self.inst.data_staging_s, req.mlperf_division,
                                        spec.init_limit(req.mlperf_division))
        if not self.clock["init_within_limit"]:
            self.warnings.append(f"init took {self.init_s:.1f} s, over MLPerf's {self.clock['init_limit_s']:g} s "
                                 f"limit for the {req.mlperf_division} division: not a compliant run")
        if (trainer := backend.own_trainer(state)) is not None:  # a whole trainer of its own (veRL) drives the
            self.account.lap("init_s")  # clock: it sets steps, evaluations and status (suite/backends/verl/launch.py)
            try:
                return trainer.drive(self)
            finally:
                self.account.lap("other_s")  # its phases are in Result.phases
        if req.mode == "throughput":  # its own loop: warm-up, then every step timed; no evaluation, no target
            self.account.lap("init_s")
            throughput.measure(self, workload, backend, state)
            return

        ckpt = self.job.ckpt = recovery.checkpointer(self, backend)

        # ---- run_start: the clock runs from here, never paused -----------------------------------------
        self.inst.run_start()
        t0, self.job.run_start_epoch = time.perf_counter(), time.time()
        (account := self.account).lap("init_s", t0)
        # a backend with model parallelism says which data shard this rank reads (TP peers read the same one)
        shard = backend.data_shard()
        data_rank, data_world = shard if shard is not None else (self.dist.rank, self.dist.world)
        batches = self.faults.batches(iter(workload.train_batches(data_rank, data_world)))
        account.lap("data_wait_s")  # a loader that starts workers or reads ahead pays for it here
        if ckpt is not None and (found := ckpt.latest()) is not None:  # a restarted job: the job's clock, never paused
            t0 = recovery.restore(self, found, backend, state, batches)
        recovery.progress_file(self, ckpt)
        ev = spec.eval
        self.t0 = t0
        max_steps = spec.budget.max_steps
        step_hooks = self.inst.has_step_hooks()  # device events, NVTX, a profiler window; else skipped
        loss_every, loss_late = self.loss_check
        watched: tuple[int, Any] | None = None  # (step, loss) whose read waits for the next step (loss_late)
        next_progress = t0 + 1.0
        code = CONTINUE
        fault_active = self.faults.active

        def evaluate() -> bool:
            with account.timed("eval_s"):
                return _evaluate()

        def _evaluate() -> bool:
            self.inst.eval_begin(self.steps, self.samples)
            backend.synchronize()
            te = time.perf_counter()
            scores = workload.evaluate(backend.eval_model(state))
            backend.synchronize()
            if spec.target.metric not in scores:  # a task that declares no reported_metrics: stop at once
                raise ValueError(f"target.metric {spec.target.metric!r} is not among the metrics this task's "
                                 f"evaluation reports ({', '.join(sorted(scores)) or 'none'}); set target.metric "
                                 "to one of them")
            now = time.perf_counter()
            self.eval_s += now - te
            elapsed = now - t0
            self.curve.append(
                EvalPoint(step=self.steps, samples=self.samples, elapsed_s=elapsed, train_s=elapsed - self.eval_s,
                          metrics={k: float(v) for k, v in scores.items()})
            )
            self.progress(Progress("eval", spec.name, req.seed, self.steps, elapsed, self.last_loss,
                                   scores.get(spec.target.metric), spec.target.value))
            # a compression method still converging (pruning short of its sparsity) cannot reach the target yet
            met = spec.target.met(scores) and bool(backend.target_may_count())
            self.inst.eval_end(self.steps, self.samples, spec.target.metric, scores, met)
            return met

        watch = pauses.PauseWatch(lambda: self.steps).start()  # its own thread: nothing added to the step loop
        try:
            if ev.at_start and evaluate():
                code = REACHED
            account.lap_around("other_s")
            while code == CONTINUE:
                if step_hooks:
                    self.inst.step_begin()
                ts = time.perf_counter()
                batch = next(batches)
                td = time.perf_counter()
                self.data_wait_s += td - ts
                out = backend.train_step(state, batch)
                if fault_active:
                    backend.synchronize()
                    self.faults.after_step(time.perf_counter() - td)
                if step_hooks:
                    self.inst.step_end()
                self.steps += 1
                self.samples += spec.data.batch_size
                if watched is not None:  # the loss of an earlier step, read now that the device has moved on
                    code, watched = self._read_loss(*watched), None
                if self.steps % loss_every == 0:
                    if loss_late:
                        watched = (self.steps, out.loss)
                    else:
                        code = self._read_loss(self.steps, out.loss)
                now = time.perf_counter()
                self.step_times.append(now - ts)
                if code == CONTINUE and self.steps % ev.every_steps == 0 and self.steps >= (ev.first_step or 0) \
                        and evaluate():
                    code = REACHED
                    self.time_to_target_s = time.perf_counter() - t0
                    self.inst.target_reached()
                    self.steps_to_target, self.samples_to_target = self.steps, self.samples
                now = time.perf_counter()
                if code == CONTINUE:
                    if self.flag.signum is not None:
                        code = INTERRUPTED
                    elif now - t0 >= spec.budget.max_train_s or (max_steps and self.steps >= max_steps):
                        code = BUDGET
                if self.dist.world > 1:  # each rank's wait here: who comes last (suite/execution/ranks.py)
                    code = ranks.agree(self, code)
                if now >= next_progress:
                    next_progress = now + 1.0
                    self.progress(Progress("step", spec.name, req.seed, self.steps, now - t0, self.last_loss))
                account.end_step(ts, td)
                if ckpt is not None:  # a save's time is taken off the next step's, as an evaluation's is
                    recovery.after_step(self, ckpt, code == CONTINUE, backend, state)
                if fault_active:
                    self.faults.end_of_step(self.steps)
        finally:
            backend.synchronize()
            account.lap_around("other_s")  # a step cut short
            if ckpt is not None:
                recovery.end(self, ckpt, code != CONTINUE)
            self.total_s = time.perf_counter() - t0
            self.train_s = self.total_s - self.eval_s
            self.warnings += pauses.warnings_for(watch.stop(), t0, t0 + self.total_s,
                                                 float(np.median(self.step_times)) if self.step_times else None)
            self.inst.clock_stopped()
            self.memory = self.device.memory_stats()
        if code == REACHED and self.time_to_target_s is None:  # reached at the initial evaluation
            self.time_to_target_s, self.steps_to_target, self.samples_to_target = self.total_s, 0, 0
        self.status = STATUS_OF[code]
        ranks.gather(self)  # a collective: every rank got here (the stop was agreed)
        self.side_files = side_files(workload, backend.eval_model(state), self.warnings) if code != DIVERGED else {}
        if code == DIVERGED:
            self.error = f"non-finite loss {self.last_loss} at step {self.diverged_step}"
        if code == INTERRUPTED:
            self.error = self.flag.reason or f"stopped by signal {signal.Signals(self.flag.signum).name}"  # type: ignore[arg-type]

    # ---- the record ----------------------------------------------------------------------------------

    def result(self) -> Result:
        spec, req = self.spec, self.req
        world = self.dist.world
        config = {
            "spec": spec.canonical(),
            "spec_source": req.spec_source,
            "overrides": req.overrides,
            "variant": req.variant,
            "precision": req.precision,
            "compile": req.compile,
            "mode": req.mode,
            "threads": torch.get_num_threads(),
            **req.extra_config,
            **self.inst.config_fields(),
        }
        if self.backend is not None:
            try:
                if report := self.backend.algorithm_report():
                    config["algorithm_report"] = report
            except Exception as e:  # noqa: BLE001 - a broken report must not lose the result
                self.warnings.append(f"algorithm_report failed: {type(e).__name__}: {e}")
        final = self.curve[-1].metrics if self.curve else {}
        self.warnings += synthetic.warnings(synthetic_data := synthetic.sources(spec, data_root()))
        measured = self.inst.result_fields(
            flops_per_sample=self.flops_per_sample, tokens_per_sample=self.tokens_per_sample, samples=self.samples,
            steps=self.steps, train_s=self.train_s, data_wait_s=self.data_wait_s, host_step_times_s=self.step_times,
            world=world, reached=self.status == "reached")
        measured["throughput"].update(bandwidth.bytes_moved_fields(
            getattr(self, "bytes_source", None), measured["throughput"].get("steady_samples_per_s"), world,
            getattr(self.inst.peak, "device", None) or self.device.type))
        parallel = self.backend.parallel_layout() if self.backend is not None else {"dp": world}
        backend_version = None
        if self.backend is not None:
            try:
                backend_version = self.backend.available().version
            except Exception:  # noqa: BLE001
                backend_version = None
        return Result(
            run_id=self.run_id,
            started_at=self.started_at,
            workload=spec.name,
            workload_version=spec.version,
            spec_hash=spec.spec_hash(),
            backend=req.backend,
            backend_version=backend_version,
            tier=req.tier,
            config=config,
            parallel=parallel,
            status=self.status,  # type: ignore[arg-type]
            time_to_target_s=self.time_to_target_s,
            train_s=self.train_s,
            eval_s=self.eval_s,
            init_s=self.init_s,
            total_s=self.total_s,
            steps=self.steps,
            samples=self.samples,
            steps_to_target=self.steps_to_target,
            samples_to_target=self.samples_to_target,
            final_metrics=final,
            flops_per_sample=self.flops_per_sample,
            memory=self.memory,
            eval_curve=self.curve,
            hardware=environment.hardware(self.device, world, load_start=self.inst.load_start),
            clock=self.clock,
            software=environment.software(),
            git=environment.git_info(),
            seed=req.seed,
            world_size=world,
            error=self.error,
            mode=req.mode,  # type: ignore[arg-type]
            synthetic_data=bool(synthetic_data),
            step_times_s=throughput.compact_steps(self) if req.mode == "throughput" else [],
            goodput=recovery.account_record(self),
            **{**measured, **self.reported, "warnings": self.warnings + measured["warnings"]},
        )


def record(the_run: Run, result: Result) -> Path | None:
    """Rank 0 writes the result (atomically, append-only) and its :::MLLOG log beside it; returns the path."""
    results_dir = the_run.req.results_dir
    if results_dir is None or not the_run.dist.is_main:
        return None
    return write_run(results_dir, result, the_run.inst.mllog_text(), getattr(the_run, "side_files", None))


def run(req: RunRequest, progress: ProgressFn | None = None) -> tuple[Result, Path | None]:
    """Run one seed in this process; rank 0 writes the result and returns its path."""
    the_run = Run(req, progress)
    result = the_run.execute()
    return result, record(the_run, result)

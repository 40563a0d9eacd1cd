"""Everything one run measures besides the harness's own clock: peak (table + GEMM), MFU/HFU, device step
timers, energy, the MLLOG log, profiler and NVTX ranges. harness.py only calls these hooks at fixed points.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from suite.measure import class_peaks, environment, flops, metrics, mlperf_keys, op_dtypes, peaks
from suite.measure.energy import EnergyMeter
from suite.measure.mllog import MLLogRecorder
from suite.measure.profiling import Nvtx, Profiler, ProfileWindow
from suite.results.record import PeakInfo


def recompute_fraction(layout: dict[str, Any]) -> float | None:
    """Share of the forward that activation checkpointing recomputes, from the backend's parallel_layout().

    Backends report `activation_checkpointing` as False/True/"full"/"none" or a fraction in [0, 1];
    anything else (e.g. "selective" without a fraction) is unknown and makes HFU null rather than guessed.
    """
    ac = layout.get("activation_checkpointing", False)
    if ac in (False, None, "none", "off", 0):
        return 0.0
    if ac in (True, "full"):
        return 1.0
    if isinstance(ac, (int, float)) and 0.0 <= float(ac) <= 1.0:
        return float(ac)
    return None


def backend_recompute(backend: Any, layout: dict[str, Any]) -> float | None:
    """The hook for HFU: a backend that recomputes activations reports `recompute_fraction()` (the share of
    the forward it re-runs, in [0, 1]); otherwise its parallel_layout()'s activation_checkpointing is read."""
    value = backend.recompute_fraction()
    if value is None:
        return recompute_fraction(layout)
    return float(value) if 0.0 <= float(value) <= 1.0 else None


def sample_counts(workload: Any) -> tuple[int | None, int | None]:
    """(train, eval) sample counts of the workload's data set, for the MLLOG's train_samples/eval_samples.
    A workload may say so itself (`train_samples()`, `eval_samples()`); else the usual holders are read."""
    def size(obj: Any) -> int | None:
        if obj is None:
            return None
        shape = getattr(obj, "shape", None)
        if shape is not None and len(shape):
            return int(shape[0])
        try:
            return len(obj)
        except TypeError:
            return None

    if hasattr(workload, "train_samples") and hasattr(workload, "eval_samples"):
        return workload.train_samples(), workload.eval_samples()
    splits = getattr(workload, "splits", None)
    train = size(getattr(splits, "train_x", None)) or size(getattr(workload, "train_idx", None))
    if train is None and splits is not None and getattr(workload, "seq_len", None):  # token streams: windows
        tokens = size(getattr(splits, "train", None))
        train = tokens // int(workload.seq_len) if tokens else None
    elif train is None:
        train = size(getattr(splits, "train", None))
    evals = size(getattr(workload, "val_x", None)) or size(getattr(workload, "val_idx", None))
    if evals is None:
        evals = size(getattr(workload, "val", None))
    if evals is None and getattr(workload, "val_batches", None) is not None:
        evals = sum(int(b.get("num_graphs", 0)) for b in workload.val_batches) or None
    return train, evals


class Instruments:
    def __init__(self, *, workload: str, seed: int, device: Any, dist: Any, precision: str,
                 peak_tflops: float | None = None, profile_dir: Path | None = None,
                 profile_window: ProfileWindow | None = None, nvtx: bool = False, run_id: str = "",
                 measure_peak: bool = True, attention_flops: str = "full", mlperf_org: str | None = None,
                 mlperf_division: str = "open", config_filename: str = "", mlperf_benchmark: str | None = None):
        self.workload, self.seed, self.device, self.dist = workload, seed, device, dist
        self.precision, self.peak_tflops, self.measure_peak = precision, peak_tflops, measure_peak
        self.warnings: list[str] = []
        self.peak: peaks.Peak | None = None
        self.gemm: peaks.GemmResult | None = None
        self.recompute: float | None = 0.0
        self.timer = metrics.StepTimer(device.type)
        self.mllog = MLLogRecorder(mlperf_benchmark or workload) if dist.is_main else None
        self.nvtx = Nvtx(nvtx or profile_dir is not None)
        self.profiler: Profiler | None = None
        if profile_dir is not None and dist.is_main:
            name = f"{workload.replace('/', '-')}-seed{seed}-{run_id or 'run'}"
            self.profiler = Profiler(profile_dir, name, device.type, profile_window)
        self.energy: EnergyMeter | None = None
        self.run_stop_ms: int | None = None
        self.mllog_samples_per_sample = 1  # the log's samples per harness sample (GRPO: completions per prompt)
        self._steps = 0
        if attention_flops not in ("full", "causal"):
            raise ValueError(f"attention FLOPs convention {attention_flops!r}: expected full or causal")
        self.attention_flops = attention_flops
        self.mlperf_org, self.mlperf_division, self.config_filename = mlperf_org, mlperf_division, config_filename
        self.flops_by_class: dict[str, float] = {}  # per sample, the full attention convention
        self.by_class: dict[str, class_peaks.ClassPeak] = {}
        self.peak_rule: str | None = None
        self.data_staging_s: float | None = None  # the workload's construction: data read, normalised, moved
        self.workload: Any = None  # set by setup; a workload's data_pipeline() goes into the result's config
        self.load_start = environment.load_average()

    # ---- init (untimed) ----------------------------------------------------------------------------------

    def init_start(self) -> None:
        if self.mllog:
            self.mllog.init_start()

    def model_flops_per_sample(self, workload: Any, full: float) -> float:
        """The workload's FLOPs per sample in this run's attention convention (full: as the workload counts)."""
        fn = getattr(workload, "flops_by_class", None)
        by_class = fn() if fn is not None else None
        if by_class and abs(sum(by_class.values()) - full) > 1e-6 * max(full, 1.0):
            self.warnings.append(f"flops_by_class sums to {sum(by_class.values()):.4g}, not flops_per_sample "
                                 f"{full:.4g}: the op-class split is ignored")
            by_class = None
        self.flops_by_class = dict(by_class or {})
        if self.attention_flops == "causal" and self.flops_by_class:
            return sum(op_dtypes.causal_flops(self.flops_by_class).values())
        return full

    def setup(self, *, spec: Any, backend: Any, state: Any, platform: str, workload: Any = None,
              request: Any = None) -> None:
        """After backend.setup: peak (table, override, GEMM), HFU's recompute share, NVTX hooks, MLLOG header."""
        import torch

        self.workload = workload

        try:
            name = self.device.name()
        except Exception:  # noqa: BLE001
            name = self.device.type
        try:
            by_class = (op_dtypes.causal_flops(self.flops_by_class) if self.attention_flops == "causal"
                        else self.flops_by_class)
            resolved = class_peaks.resolve_by_class(self.device.type, name, self.precision, by_class or None,
                                                  self.peak_tflops, torch.get_num_threads())
            self.peak, self.by_class, self.peak_rule = resolved.peak, resolved.by_class, resolved.rule  # type: ignore[assignment]
            self.warnings += resolved.warnings
        except ValueError as e:
            self.warnings.append(str(e))
        if self.measure_peak:
            budget = 0.3 if self.device.type == "cpu" else 1.0
            # in the dtype of the class with the largest FLOP share (an fp32 CNN on CUDA: TF32 convolutions)
            main = max(self.by_class.values(), key=lambda cp: cp.share or 0.0, default=None)
            self.gemm = peaks.measure_gemm_cached(self.device.torch, self.precision, budget_s=budget,
                                                  dtype=main.dtype if main is not None and main.share else None)
            if self.peak is not None and self.gemm.flops_per_s > 1.05 * self.peak.flops_per_s:
                self.warnings.append(
                    f"measured GEMM {self.gemm.flops_per_s / 1e12:.3g} TFLOP/s exceeds the {self.peak.provenance} "
                    f"peak {self.peak.flops_per_s / 1e12:.3g} TFLOP/s: the peak is too low ({self.peak.source})")
        layout = backend.parallel_layout()
        self.recompute = backend_recompute(backend, layout)
        if self.recompute is None:
            self.warnings.append(f"activation_checkpointing={layout.get('activation_checkpointing')!r} has no "
                                 "known recompute share: hfu is null")
        self.nvtx.attach(state.raw_model, state.optimizer)
        if self.dist.is_main and self.device.type == "cuda":
            indices = list(range(self.dist.local_world)) if self.dist.world == self.dist.local_world else []
            if indices:
                self.energy = EnergyMeter("cuda", indices)
            else:
                self.warnings.append("energy: multi-node runs are not aggregated across nodes; energy_j is null")
        else:
            self.energy = EnergyMeter(self.device.type) if self.dist.is_main else None
        if self.mllog:
            opt = spec.optimizer
            # the task's own keys (LoRA's rank, GRPO's generations; GRPO's global batch counts completions)
            own = dict(workload.mllog_hyperparameters()) if hasattr(workload, "mllog_hyperparameters") else {}
            if hasattr(workload, "mllog_samples_per_sample"):  # MLPerf's GRPO samples_count counts completions
                self.mllog_samples_per_sample = int(workload.mllog_samples_per_sample())
            self.mllog.hyperparameters(
                seed=self.seed, global_batch_size=own.pop("global_batch_size", spec.data.batch_size),
                optimizer=own.pop("opt_name", getattr(opt, "name", str(opt))),  # a benchmark's own spelling
                learning_rate=getattr(opt, "lr", None), platform=platform,
                extra={"precision": self.precision, "world_size": self.dist.world,
                       **mlperf_keys.hyperparameters(spec, workload, getattr(getattr(backend, "opts", None),
                                                                             "grad_clip", None)),
                       **own})
            self._mllog_submission(spec, layout, workload, backend)

    def _mllog_submission(self, spec: Any, layout: dict[str, Any], workload: Any, backend: Any) -> None:
        assert self.mllog is not None
        dtypes = op_dtypes.op_dtypes(self.device.type, self.precision)
        precision_by_class = {c: op_dtypes.MLPERF_DTYPE[d.dtype] for c, d in dtypes.items()}
        # gradients are reduced in the weights' dtype: bf16 with bf16 weights, else fp32 (autocast keeps fp32
        # grads); a backend that reduces in another dtype says so with comm_dtype() (MLPerf's names)
        comm = backend.comm_dtype() or ("bfloat16" if self.precision == "bf16_master" else "fp32")
        dp = int(layout.get("dp") or self.dist.world or 1)
        global_bs = int(spec.data.batch_size)
        micro = int(getattr(spec.data, "micro_batch_size", None) or max(1, global_bs // max(1, dp)))
        train, evals = sample_counts(workload) if workload is not None else (None, None)
        self.mllog.submission(
            org=self.mlperf_org or "unspecified", division=self.mlperf_division, train_samples=train,
            eval_samples=evals, precision_by_class=precision_by_class, comm_precision=comm, layout=layout,
            micro_batch_size=micro, gradient_accumulation_steps=max(1, global_bs // max(1, micro * dp)),
            config_filename=self.config_filename or spec.name, cache_clear=False,
            staging_s=self.data_staging_s)

    # ---- the timed run -------------------------------------------------------------------------------------

    def run_start(self) -> None:
        if self.mllog:
            self.mllog.init_stop()
            self.mllog.run_start()
        if self.energy:
            self.energy.start()
        if self.profiler:
            self.profiler.start()

    def has_step_hooks(self) -> bool:
        """Whether step_begin/step_end do anything (device step events, NVTX ranges, a profiler window): when
        not, the loop skips both calls."""
        return self.timer.uses_device_events or self.nvtx.enabled or self.profiler is not None

    def step_begin(self) -> None:
        self._steps += 1
        self.nvtx.push(f"step {self._steps}")
        self.timer.begin()

    def step_end(self) -> None:
        self.timer.end()
        self.nvtx.step_end()
        if self.profiler:
            self.profiler.step()

    def eval_begin(self, step: int, samples: int) -> None:
        self.nvtx.push("eval")
        if self.mllog:
            self.mllog.eval_start(step, samples * self.mllog_samples_per_sample)

    def eval_end(self, step: int, samples: int, metric: str, scores: dict[str, float], met: bool) -> None:
        self.nvtx.pop()
        if self.mllog:
            self.mllog.eval_stop(step, samples * self.mllog_samples_per_sample, metric, scores, running=not met)

    def target_reached(self) -> None:
        if self.energy:
            self.energy.mark_target()

    def clock_stopped(self) -> None:
        self.run_stop_ms = self.mllog.now_ms() if self.mllog else int(time.time() * 1e3)
        if self.energy:
            self.energy.stop()
        if self.profiler:
            self.profiler.stop()

    def finish(self, status: str, steps: int, samples: int) -> None:
        if self.mllog:
            self.mllog.run_stop(status, steps, samples * self.mllog_samples_per_sample, time_ms=self.run_stop_ms)
        self.nvtx.detach()

    # ---- the record ----------------------------------------------------------------------------------------

    def result_fields(self, *, flops_per_sample: float | None, tokens_per_sample: int, samples: int, steps: int,
                      train_s: float, data_wait_s: float, host_step_times_s: list[float], world: int,
                      reached: bool) -> dict[str, Any]:
        try:
            device_times = self.timer.device_times_s()
        except Exception as e:  # noqa: BLE001 - a failed device leaves its events unreadable
            device_times = []
            self.warnings.append(f"device step timers unreadable ({type(e).__name__}: {e}); host timings used")
        step_times = device_times or host_step_times_s
        tput = metrics.throughput(samples, tokens_per_sample, train_s, data_wait_s)
        samples_per_step = samples // steps if steps else 0
        steady = metrics.steady_samples_per_s(step_times, samples_per_step) if step_times else None
        warnings = list(self.warnings)
        if steady is not None:
            tput["steady_samples_per_s"] = steady
            if tokens_per_sample > 1:
                tput["steady_tokens_per_s"] = steady * tokens_per_sample
        model_fps = metrics.model_flops_per_s(flops_per_sample, steady)
        other = "causal" if self.attention_flops == "full" else "full"
        other_fps = None
        if model_fps is not None and self.flops_by_class.get("attention"):
            full = sum(self.flops_by_class.values())
            causal = sum(op_dtypes.causal_flops(self.flops_by_class).values())
            other_fps = metrics.model_flops_per_s(causal if other == "causal" else full, steady)
        hw_fps = None
        if model_fps is not None and self.recompute is not None and flops_per_sample is not None:
            hw_fps = flops.hardware_flops_per_sample(flops_per_sample, self.recompute) * (steady or 0.0)
        if model_fps is not None:
            tput["model_flops_per_s"] = model_fps
        tput.update(metrics.per_device(tput, world, ("samples_per_s", "tokens_per_s", "steady_samples_per_s",
                                                     "steady_tokens_per_s", "model_flops_per_s")))
        table_peak = self.peak.flops_per_s if self.peak else None
        measured = self.gemm.flops_per_s if self.gemm else None
        peak_info = None
        if self.peak is not None or self.gemm is not None:
            peak_info = PeakInfo(
                device=self.peak.device if self.peak else self.device.type,
                dtype=self.peak.dtype if self.peak else (self.gemm.dtype if self.gemm else self.precision),
                flops_per_s=table_peak,
                source=self.peak.source if self.peak else "none: device not in the peak table",
                provenance=self.peak.provenance if self.peak else None,
                measured_flops_per_s=measured,
                measured_gemm_n=self.gemm.n if self.gemm else None,
                measured_dtype=self.gemm.dtype if self.gemm else None,
                overridden=bool(self.peak and self.peak.provenance == "override"),
                rule=self.peak_rule,
                by_class={c: {"dtype": cp.dtype, "flops_per_s": cp.flops_per_s, "share": cp.share, "why": cp.why,
                              "source": cp.source} for c, cp in self.by_class.items()},
            )
        if self.profiler and (w := self.profiler.warning()):
            warnings.append(w)
        if self.profiler and self.profiler.written:
            warnings.append("profiled run: steps inside the profiling window carry profiler overhead")
        mfu_measured = metrics.utilization(model_fps, world, measured)
        if mfu_measured is not None and mfu_measured > 1.05:
            warnings.append(f"the model ran at {mfu_measured:.2f}x the GEMM benchmark's FLOP/s: the benchmark was "
                            "disturbed (a busy machine, clocks still ramping) and mfu_measured_peak is not reliable")
        energy_j = self.energy.energy_j if self.energy else None
        if self.device.type == "cuda" and self.energy is not None and energy_j is None:
            warnings.append(f"energy_j is null: {self.energy.reason or 'NVML gave no reading'}")
        mfu = metrics.utilization(model_fps, world, table_peak)
        mfu_by_attention: dict[str, float | None] = {}
        if other_fps is not None:
            mfu_by_attention = {self.attention_flops: mfu, other: metrics.utilization(other_fps, world, table_peak)}
        return {
            "flops_by_class": (op_dtypes.causal_flops(self.flops_by_class) if self.attention_flops == "causal"
                               else self.flops_by_class),
            "attention_flops": self.attention_flops if self.flops_by_class.get("attention") else None,
            "mfu_by_attention": mfu_by_attention,
            "throughput": tput,
            "step_time_s": metrics.step_time_report(host_step_times_s, device_times),
            "mfu": mfu,
            "hfu": metrics.utilization(hw_fps, world, table_peak),
            "mfu_measured_peak": mfu_measured,
            "peak": peak_info,
            "energy_j": energy_j,
            "energy_to_target_j": self.energy.to_target_j if (self.energy and reached) else None,
            "warnings": warnings,
            # RL post-training (task grpo): the step's time by phase, each phase's MFU against the same peak
            "phases": (self.workload.phase_report(table_peak, self.peak.dtype if self.peak else self.precision)
                       if hasattr(self.workload, "phase_report") else {}),
        }

    def config_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.peak_tflops is not None:
            out["peak_tflops_override"] = self.peak_tflops
        if self.profiler:
            out["profile"] = {"trace": str(self.profiler.path), "skip_first": self.profiler.window.skip_first,
                              "warmup": self.profiler.window.warmup, "active": self.profiler.window.active}
        if self.nvtx.enabled:
            out["nvtx"] = True
        describe = getattr(self.workload, "data_pipeline", None)  # e.g. which image decoder ran (ImageNet)
        if describe is not None:
            try:
                out["data_pipeline"] = describe()
            except Exception as e:  # noqa: BLE001 - a broken description must not lose the result
                self.warnings.append(f"data_pipeline failed: {type(e).__name__}: {e}")
        return out

    # ---- the MLLOG file ------------------------------------------------------------------------------------

    def mllog_text(self) -> str | None:
        """The run's whole :::MLLOG log (None when MLLOG is off); the results module writes it."""
        return self.mllog.text() if self.mllog is not None else None

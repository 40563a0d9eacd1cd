"""Everything one run measures besides the harness's own clock: peak (table + GEMM), MFU/HFU, device step
timers, energy, the MLLOG log, profiler and NVTX ranges. harness.py only calls these hooks at fixed points.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from suite.measure import flops, metrics, peaks
from suite.measure.energy import EnergyMeter
from suite.measure.mllog import MLLogRecorder
from suite.measure.profiling import Nvtx, Profiler, ProfileWindow
from suite.results import PeakInfo


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


class Instruments:
    def __init__(self, *, workload: str, seed: int, device: Any, dist: Any, precision: str,
                 peak_tflops: float | None = None, profile_dir: Path | None = None,
                 profile_window: ProfileWindow | None = None, nvtx: bool = False, run_id: str = "",
                 measure_peak: bool = True):
        self.workload, self.seed, self.device, self.dist = workload, seed, device, dist
        self.precision, self.peak_tflops, self.measure_peak = precision, peak_tflops, measure_peak
        self.warnings: list[str] = []
        self.peak: peaks.Peak | None = None
        self.gemm: peaks.GemmResult | None = None
        self.recompute: float | None = 0.0
        self.timer = metrics.StepTimer(device.type)
        self.mllog = MLLogRecorder(workload) if dist.is_main else None
        self.nvtx = Nvtx(nvtx or profile_dir is not None)
        self.profiler: Profiler | None = None
        if profile_dir is not None and dist.is_main:
            name = f"{workload.replace('/', '-')}-seed{seed}-{run_id or 'run'}"
            self.profiler = Profiler(profile_dir, name, device.type, profile_window)
        self.energy: EnergyMeter | None = None
        self.run_stop_ms: int | None = None
        self._steps = 0

    # ---- init (untimed) ----------------------------------------------------------------------------------

    def init_start(self) -> None:
        if self.mllog:
            self.mllog.init_start()

    def setup(self, *, spec: Any, backend: Any, state: Any, platform: str) -> None:
        """After backend.setup: peak (table, override, GEMM), HFU's recompute share, NVTX hooks, MLLOG header."""
        import torch

        try:
            name = self.device.name()
        except Exception:  # noqa: BLE001
            name = self.device.type
        try:
            self.peak, warns = peaks.resolve(self.device.type, name, self.precision, self.peak_tflops,
                                             torch.get_num_threads())
            self.warnings += warns
        except ValueError as e:
            self.warnings.append(str(e))
        if self.measure_peak:
            budget = 0.3 if self.device.type == "cpu" else 1.0
            self.gemm = peaks.measure_gemm_cached(self.device.torch, self.precision, budget_s=budget)
            if self.peak is not None and self.gemm.flops_per_s > 1.05 * self.peak.flops_per_s:
                self.warnings.append(
                    f"measured GEMM {self.gemm.flops_per_s / 1e12:.3g} TFLOP/s exceeds the {self.peak.provenance} "
                    f"peak {self.peak.flops_per_s / 1e12:.3g} TFLOP/s: the peak is too low ({self.peak.source})")
        layout = backend.parallel_layout()
        self.recompute = recompute_fraction(layout)
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
            self.mllog.hyperparameters(
                seed=self.seed, global_batch_size=spec.data.batch_size, optimizer=getattr(opt, "name", str(opt)),
                learning_rate=getattr(opt, "lr", None), platform=platform,
                extra={"precision": self.precision, "world_size": self.dist.world})

    # ---- the timed run -------------------------------------------------------------------------------------

    def run_start(self) -> None:
        if self.mllog:
            self.mllog.init_stop()
            self.mllog.run_start()
        if self.energy:
            self.energy.start()
        if self.profiler:
            self.profiler.start()

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
            self.mllog.eval_start(step, samples)

    def eval_end(self, step: int, samples: int, metric: str, scores: dict[str, float], met: bool) -> None:
        self.nvtx.pop()
        if self.mllog:
            self.mllog.eval_stop(step, samples, metric, scores, running=not met)

    def target_reached(self) -> None:
        if self.energy:
            self.energy.mark_target()

    def clock_stopped(self) -> None:
        self.run_stop_ms = int(time.time() * 1e3)
        if self.energy:
            self.energy.stop()
        if self.profiler:
            self.profiler.stop()

    def finish(self, status: str, steps: int, samples: int) -> None:
        if self.mllog:
            self.mllog.run_stop(status, steps, samples, time_ms=self.run_stop_ms)
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
                overridden=bool(self.peak and self.peak.provenance == "override"),
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
        return {
            "throughput": tput,
            "step_time_s": metrics.step_time_report(host_step_times_s, device_times),
            "mfu": metrics.utilization(model_fps, world, table_peak),
            "hfu": metrics.utilization(hw_fps, world, table_peak),
            "mfu_measured_peak": mfu_measured,
            "peak": peak_info,
            "energy_j": energy_j,
            "energy_to_target_j": self.energy.to_target_j if (self.energy and reached) else None,
            "warnings": warnings,
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
        return out

    # ---- the MLLOG file ------------------------------------------------------------------------------------

    def mllog_text(self) -> str | None:
        """The run's whole :::MLLOG log (None when MLLOG is off); the results module writes it."""
        return self.mllog.text() if self.mllog is not None else None

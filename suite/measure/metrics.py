"""Throughput, MFU/HFU, step-time percentiles (device events on accelerators) and per-device figures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def step_time_summary(step_times_s: Sequence[float], skip_first: int = 1) -> dict[str, float]:
    """p50/p90/p99/mean of one optimizer step; the first step (lazy init, compile) is reported apart."""
    if not step_times_s:
        return {}
    steady = list(step_times_s[skip_first:]) or list(step_times_s)
    return {
        "p50": percentile(steady, 50),
        "p90": percentile(steady, 90),
        "p99": percentile(steady, 99),
        "mean": sum(steady) / len(steady),
        "first": step_times_s[0],
        "count": float(len(step_times_s)),
    }


def throughput(samples: int, tokens_per_sample: int, train_s: float, data_wait_s: float) -> dict[str, float]:
    if train_s <= 0:
        return {}
    out = {"samples_per_s": samples / train_s, "data_wait_fraction": min(1.0, data_wait_s / train_s)}
    if tokens_per_sample > 1:
        out["tokens_per_s"] = samples * tokens_per_sample / train_s
    return out


def model_flops_per_s(flops_per_sample: float | None, samples_per_s: float | None) -> float | None:
    if flops_per_sample is None or samples_per_s is None:
        return None
    return flops_per_sample * samples_per_s


def utilization(flops_per_s: float | None, world: int, peak_flops_per_s: float | None) -> float | None:
    """MFU (or HFU, given hardware FLOP/s): achieved FLOP/s over world x the per-device dense peak."""
    if flops_per_s is None or not peak_flops_per_s or world < 1:
        return None
    return flops_per_s / (world * peak_flops_per_s)


def steady_samples_per_s(step_times_s: Sequence[float], samples_per_step: int, skip_first: int = 1) -> float | None:
    """Samples/s over the steady-state steps (the first, with lazy init and compilation, left out)."""
    steady = list(step_times_s[skip_first:]) or list(step_times_s)
    total = sum(steady)
    return len(steady) * samples_per_step / total if total > 0 else None


def per_device(figures: dict[str, float], world: int, keys: Sequence[str]) -> dict[str, float]:
    return {f"{k}_per_device": figures[k] / world for k in keys if k in figures and world >= 1}


class StepTimer:
    """Per-step times that are honest on accelerators.

    A host timer around an asynchronous step measures how long the launch took, not the step. On cuda/npu
    each step is bracketed by device events recorded into the stream (no synchronisation in the loop) and
    resolved once at the end: consecutive events give the device-side time of each step, idle gaps waiting
    for the host included. On CPU the host timer is exact and no events exist.
    """

    def __init__(self, device_type: str):
        mod = getattr(torch, device_type, None) if device_type in ("cuda", "npu") else None
        self._event = getattr(mod, "Event", None) if mod is not None else None
        self._pairs: list[tuple[Any, Any]] = []
        self._open: Any = None

    @property
    def uses_device_events(self) -> bool:
        return self._event is not None

    def begin(self) -> None:
        if self._event is not None:
            self._open = self._event(enable_timing=True)
            self._open.record()

    def end(self) -> None:
        if self._event is not None and self._open is not None:
            stop = self._event(enable_timing=True)
            stop.record()
            self._pairs.append((self._open, stop))
            self._open = None

    def device_times_s(self) -> list[float]:
        """Resolve the events (one synchronisation, at the end of the run)."""
        if not self._pairs:
            return []
        self._pairs[-1][1].synchronize()
        return [start.elapsed_time(stop) / 1e3 for start, stop in self._pairs]


def step_time_report(host_times_s: Sequence[float], device_times_s: Sequence[float]) -> dict[str, float]:
    """Percentiles from device events where they exist, host timings beside them (prefixed host_)."""
    if not device_times_s:
        return step_time_summary(host_times_s)
    out = step_time_summary(device_times_s)
    host = step_time_summary(host_times_s)
    out.update({f"host_{k}": v for k, v in host.items() if k in ("p50", "p90", "p99", "mean")})
    out["device_events"] = 1.0
    return out

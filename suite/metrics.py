"""Throughput, step-time percentiles and the other per-run summaries computed from the harness's raw timings."""

from __future__ import annotations

import math
from collections.abc import Sequence


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

"""Aggregates over seeds that the leaderboard, baselines and compare share.

MLPerf's olympic mean drops the fastest and the slowest run and averages the rest; a run that never
reached its target counts as infinitely slow (never as missing), so one failed seed of five is dropped as
the slowest, and two make the aggregate infinite.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from suite.results import Result

INF = math.inf


def tta_or_inf(r: Result) -> float:
    """Time to target of one run; infinite where the run did not reach it."""
    return r.time_to_target_s if r.status == "reached" and r.time_to_target_s is not None else INF


def olympic_mean(values: Sequence[float]) -> float:
    """Drop the lowest and the highest value and average the rest (MLPerf). With < 3 values: the mean."""
    xs = sorted(values)
    if not xs:
        return math.nan
    if len(xs) >= 3:
        xs = xs[1:-1]
    if any(math.isinf(x) for x in xs):
        return INF
    return sum(xs) / len(xs)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def spread(values: Sequence[float]) -> tuple[float, float]:
    """(min, max): the range quoted beside an olympic mean."""
    return (min(values), max(values)) if values else (math.nan, math.nan)


@dataclass(frozen=True)
class GroupKey:
    hardware: str
    workload: str
    backend: str
    spec_hash: str


def key_of(r: Result) -> GroupKey:
    return GroupKey(r.hardware.slug, r.workload, r.backend, r.spec_hash)


def group(results: Iterable[Result]) -> dict[GroupKey, list[Result]]:
    out: dict[GroupKey, list[Result]] = defaultdict(list)
    for r in results:
        out[key_of(r)].append(r)
    return dict(out)


@dataclass
class Aggregate:
    """One leaderboard row: several seeds of one (hardware, workload, backend, spec hash)."""

    key: GroupKey
    runs: int
    reached: int
    tta_olympic_s: float
    tta_median_s: float
    tta_min_s: float
    tta_max_s: float
    steps_to_target_median: float
    step_time_median_s: float
    samples_per_s_median: float
    mfu_median: float | None

    @property
    def success_rate(self) -> float:
        return self.reached / self.runs if self.runs else 0.0


def aggregate(key: GroupKey, runs: Sequence[Result]) -> Aggregate:
    ttas = [tta_or_inf(r) for r in runs]
    lo, hi = spread(ttas)
    steps = [float(r.steps_to_target) for r in runs if r.steps_to_target is not None and r.status == "reached"]
    step_times = [r.step_time_s["p50"] for r in runs if "p50" in r.step_time_s]
    sps = [r.throughput["samples_per_s"] for r in runs if "samples_per_s" in r.throughput]
    mfus = [r.mfu for r in runs if r.mfu is not None]
    return Aggregate(
        key=key, runs=len(runs), reached=sum(r.status == "reached" for r in runs),
        tta_olympic_s=olympic_mean(ttas), tta_median_s=median(ttas), tta_min_s=lo, tta_max_s=hi,
        steps_to_target_median=median(steps) if steps else INF,
        step_time_median_s=median(step_times), samples_per_s_median=median(sps),
        mfu_median=median(mfus) if mfus else None,
    )

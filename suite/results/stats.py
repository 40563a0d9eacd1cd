"""The ONE aggregation over seeds: the leaderboard, baselines, compare and study all use `aggregate`.

MLPerf's olympic mean drops the fastest and the slowest run and averages the rest; a run that never
reached its target counts as infinitely slow (never as missing), so one failed seed of five is dropped as
the slowest, and two make the aggregate infinite. Steps to target (the convergence factor of TTA) counts a
miss as infinite too; time per step (the throughput factor) is the median step time over the seeds that
measured one. `RunFigures` is what one seed contributes, from a Result (`figures_of`) or a baseline file.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from suite.results.conditions import load_warning, pause_warning

if TYPE_CHECKING:
    from suite.results.record import Result

INF = math.inf


def _reached(status: str, time_to_target_s: float | None) -> bool:
    return status == "reached" and time_to_target_s is not None


def tta_of(status: str, time_to_target_s: float | None) -> float:
    """Time to target of one run from its status and figure; infinite where the run did not reach it."""
    return time_to_target_s if _reached(status, time_to_target_s) else INF  # type: ignore[return-value]


def _steps(status: str, time_to_target_s: float | None, steps_to_target: int | None) -> float:
    ok = _reached(status, time_to_target_s) and steps_to_target is not None
    return float(steps_to_target) if ok else INF  # type: ignore[arg-type]


def tta_or_inf(r: Result) -> float:
    """Time to target of one run; infinite where the run did not reach it."""
    return tta_of(r.status, r.time_to_target_s)


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


class RunFigures(BaseModel):
    """One seed's figures, as the aggregation and compare use them. None = not measured; a run that did not
    reach the target has time_to_target_s None and counts as infinitely slow (see `tta`)."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    seed: int
    status: str
    time_to_target_s: float | None = None
    steps_to_target: int | None = None
    time_per_step_s: float | None = Field(default=None, description="median step time (p50), else train_s/steps")
    samples_per_s: float | None = None
    mfu: float | None = None
    peak_memory_bytes: float | None = Field(default=None, description="device allocator peak, else host peak RSS")
    energy_j: float | None = None
    git_sha: str | None = None
    started_at: str | None = None
    host_load: str | None = Field(default=None, description="a warning when the run's host was loaded")
    paused: str | None = Field(default=None, description="a warning when the process was paused inside the timed "
                               "run, so that its time to target holds the pause (suite/measure/pauses.py)")
    rollout_s_per_step: float | None = Field(default=None, description="RL post-training: generation seconds per step")
    training_s_per_step: float | None = Field(default=None, description="RL post-training: old/ref log-prob and "
                                              "update seconds per step")
    goodput_parts_s: dict[str, float] = Field(default_factory=dict, description="the wall-clock account's parts "
                                              "(Result.goodput.parts_s; empty: not measured)")
    goodput: float | None = Field(default=None, description="productive step time / wall time")

    @property
    def reached(self) -> bool:
        return _reached(self.status, self.time_to_target_s)

    def tta(self) -> float:
        return tta_of(self.status, self.time_to_target_s)

    def steps(self) -> float:
        return _steps(self.status, self.time_to_target_s, self.steps_to_target)


def peak_memory(memory: dict[str, object]) -> float | None:
    for key in ("device_peak_allocated_bytes", "host_peak_rss_bytes"):
        v = memory.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
    return None


def time_per_step(step_time_s: dict[str, float], train_s: float, steps: int) -> float | None:
    """The median step time (p50) where measured, else train time / steps."""
    tps = step_time_s.get("p50")
    return train_s / steps if tps is None and steps > 0 else tps


def figures_of(r: Any, started_at: str | None = None) -> RunFigures:
    """The figures of one run: the ONE builder of RunFigures (compare, promote, the index and the lean reader all
    come here, so a new per-seed figure is added here and in RunFigures). `r` is a validated Result, or
    results/lean.py's LeanResult (the same fields, its `started_at` still text: pass it, checked, as `started_at`)."""
    return RunFigures.model_construct(  # every field comes from a validated Result (or the typed lean decoder)
        run_id=r.run_id, seed=r.seed, status=r.status, time_to_target_s=r.time_to_target_s,
        steps_to_target=r.steps_to_target, time_per_step_s=time_per_step(r.step_time_s, r.train_s, r.steps),
        samples_per_s=r.throughput.get("samples_per_s"), mfu=r.mfu, peak_memory_bytes=peak_memory(r.memory),
        energy_j=r.energy_j, git_sha=r.git.sha, started_at=started_at or r.started_at.isoformat(),
        host_load=load_warning(r.hardware), paused=pause_warning(r.warnings),
        rollout_s_per_step=phase_figure(r.phases, "rollout_s_per_step"),
        training_s_per_step=phase_figure(r.phases, "training_s_per_step"),
        goodput_parts_s=dict(r.goodput.parts_s) if r.goodput else {}, goodput=r.goodput.goodput if r.goodput else None,
    )


def figures_from_json(text: str) -> RunFigures:
    """RunFigures as the index stores them (`figures_of(...).model_dump_json()`), unchecked: the index wrote them."""
    return RunFigures.model_construct(**json.loads(text))


def phase_figure(phases: dict[str, Any], key: str) -> float | None:
    v = phases.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _median_or_none(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(xs) if xs else None


@dataclass(frozen=True)
class Aggregate:
    """Several seeds of one configuration: a leaderboard row, a baseline's aggregate, a study cell.

    Time figures are inf where too many seeds missed the target and NaN with no runs; the medians of
    optional measurements are None where no seed measured them.
    """

    runs: int
    reached: int
    tta_olympic_s: float
    tta_median_s: float
    tta_min_s: float
    tta_max_s: float
    steps_to_target_median: float  # a miss counts as infinite, as in time to target
    time_per_step_median_s: float | None
    samples_per_s_median: float | None
    mfu_median: float | None
    peak_memory_median_bytes: float | None
    energy_median_j: float | None

    @property
    def success_rate(self) -> float:
        return self.reached / self.runs if self.runs else 0.0


def _aggregate(reached: int, ttas: list[float], steps: list[float], time_per_step_s: list[float | None],
               samples_per_s: list[float | None], mfu: list[float | None], peak_memory_bytes: list[float | None],
               energy_j: list[float | None]) -> Aggregate:
    lo, hi = spread(ttas)
    return Aggregate(
        runs=len(ttas), reached=reached,
        tta_olympic_s=olympic_mean(ttas), tta_median_s=median(ttas), tta_min_s=lo, tta_max_s=hi,
        steps_to_target_median=median(steps), time_per_step_median_s=_median_or_none(time_per_step_s),
        samples_per_s_median=_median_or_none(samples_per_s), mfu_median=_median_or_none(mfu),
        peak_memory_median_bytes=_median_or_none(peak_memory_bytes), energy_median_j=_median_or_none(energy_j),
    )


def aggregate(runs: Sequence[RunFigures]) -> Aggregate:
    """The one aggregation over seeds (see the module docstring)."""
    return _aggregate(
        sum(r.reached for r in runs), [r.tta() for r in runs], [r.steps() for r in runs],
        [r.time_per_step_s for r in runs], [r.samples_per_s for r in runs], [r.mfu for r in runs],
        [r.peak_memory_bytes for r in runs], [r.energy_j for r in runs],
    )


def aggregate_results(runs: Sequence[Result]) -> Aggregate:
    """`aggregate` of the runs' `figures_of`, computed straight from the Results (the site aggregates every
    submission of 10,000 results; building a RunFigures per result made that 3x slower). The same per-seed
    functions as RunFigures' make the two agree; tests/results/test_one_aggregation.py checks they do."""
    return _aggregate(
        sum(_reached(r.status, r.time_to_target_s) for r in runs), [tta_of(r.status, r.time_to_target_s) for r in runs],
        [_steps(r.status, r.time_to_target_s, r.steps_to_target) for r in runs],
        [time_per_step(r.step_time_s, r.train_s, r.steps) for r in runs],
        [r.throughput.get("samples_per_s") for r in runs], [r.mfu for r in runs],
        [peak_memory(r.memory) for r in runs], [r.energy_j for r in runs],
    )


# ---- the test behind compare's verdicts ------------------------------------------------------------------
# Mann-Whitney U (Wilcoxon rank-sum), exact: the p-value is the share of all C(m+n, m) ways of splitting the
# pooled runs into two groups whose rank sum is at least as far from its mean as the one observed. Ranks make
# a failed run (time to target = inf) simply the slowest, ties (several failures) get mid-ranks, and the exact
# null distribution is computed for the observed tie pattern, so the level holds at 5 seeds without
# asymptotics. Beyond EXACT_MAX_N pooled runs the normal approximation (tie-corrected) is used.

EXACT_MAX_N = 60


@dataclass(frozen=True)
class RankTest:
    p_value: float
    u: float  # U of the first sample: the number of (a, b) pairs with a > b, ties counting one half
    exact: bool


@lru_cache(maxsize=4096)
def _rank_sum_null(m: int, doubled_ranks: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """Counts of every doubled rank sum over all m-subsets of `doubled_ranks` (a knapsack over the ranks)."""
    total = sum(sorted(doubled_ranks)[-m:]) if m else 0
    counts = np.zeros((m + 1, total + 1), dtype=np.float64)  # float: C(60, 30) ~ 1e17 overflows nothing
    counts[0, 0] = 1.0
    for seen, r in enumerate(doubled_ranks, start=1):
        for k in range(min(seen, m), 0, -1):
            counts[k, r:] += counts[k - 1, : total + 1 - r]
    return counts[m], total


@lru_cache(maxsize=65536)
def _exact_p(m: int, doubled_ranks: tuple[int, ...], observed_doubled_sum: int) -> float:
    """Two-sided exact p; cached because 10,000-file compares ask the same few (n, ranks, sum) many times."""
    dist, _ = _rank_sum_null(m, doubled_ranks)
    mean2 = m * (len(doubled_ranks) + 1)  # mean of the doubled rank sum
    dev = abs(observed_doubled_sum - mean2)
    extreme = np.abs(np.arange(dist.size) - mean2) >= dev
    return min(1.0, float(dist[extreme].sum() / dist.sum()))


def midranks(values: Sequence[float]) -> list[float]:
    """1-based ranks with ties sharing their mean rank; inf sorts last, so failed runs rank slowest."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i, n = 0, len(order)
    while i < n:
        j, v = i, values[order[i]]
        while j + 1 < n and values[order[j + 1]] == v:
            j += 1
        mid = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = mid
        i = j + 1
    return ranks


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> RankTest:
    """Two-sided Mann-Whitney U test of a against b (no NaN; inf allowed)."""
    m, n = len(a), len(b)
    if m == 0 or n == 0:
        raise ValueError("mann_whitney_u needs at least one value on each side")
    if any(math.isnan(x) for x in (*a, *b)):
        raise ValueError("mann_whitney_u: NaN is not a measurement; drop missing values first")
    ranks = midranks([*a, *b])
    rank_sum_a = sum(ranks[:m])
    u = rank_sum_a - m * (m + 1) / 2
    big_n = m + n
    if big_n <= EXACT_MAX_N:
        doubled = tuple(sorted(round(2 * r) for r in ranks))
        return RankTest(_exact_p(m, doubled, round(2 * rank_sum_a)), u, True)
    counts: dict[float, int] = defaultdict(int)
    for r in ranks:
        counts[r] += 1
    tie_term = sum(t**3 - t for t in counts.values()) / (big_n * (big_n - 1))
    var = m * n / 12 * ((big_n + 1) - tie_term)
    if var <= 0:
        return RankTest(1.0, u, False)
    z = (abs(u - m * n / 2) - 0.5) / math.sqrt(var)  # continuity correction
    return RankTest(min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2))), u, False)


def min_attainable_p(m: int, n: int) -> float:
    """The smallest two-sided p-value the exact test can give with m and n runs (no ties): 2 / C(m+n, m).

    When it exceeds alpha no outcome could ever be significant, so compare calls the pair not comparable
    (too few seeds) instead of reporting a reassuring "no significant change".
    """
    if m == 0 or n == 0:
        return 1.0
    return min(1.0, 2 / math.comb(m + n, m))


def fewest_seeds(alpha: float) -> int:
    """The fewest runs a side (as many on both sides) with which the exact test can reach alpha at all."""
    n = 1
    while min_attainable_p(n, n) > alpha:
        n += 1
    return n


# compare's and promote's --min-seeds: the fewest seeds a side that can give a verdict at compare's default alpha
# (0.05): 4 (2 / C(8, 4) = 0.029). It was 3, with which README's own flow could only end "not comparable" (3 + 3
# seeds: the smallest p-value is 0.1). 5 a side is the recommendation (README, docs/compare.md).
DEFAULT_MIN_SEEDS = fewest_seeds(0.05)

"""The exact Mann-Whitney U behind compare's verdicts, checked against scipy and brute-force permutation."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from scipy import stats as sps

from suite.results import stats

INF = math.inf


def _permutation_p(a: list[float], b: list[float]) -> float:
    """Two-sided p by enumerating every split of the pooled runs (the definition of the exact test)."""
    pool = [*a, *b]
    ranks = stats.midranks(pool)
    m = len(a)
    mean = m * (len(pool) + 1) / 2
    observed = abs(sum(ranks[:m]) - mean)
    splits = list(itertools.combinations(range(len(pool)), m))
    return sum(abs(sum(ranks[i] for i in c) - mean) >= observed - 1e-9 for c in splits) / len(splits)


def test_exact_p_matches_scipy_without_ties() -> None:
    rng = random.Random(7)
    for _ in range(300):
        a = [rng.random() for _ in range(rng.randint(1, 9))]
        b = [rng.random() for _ in range(rng.randint(1, 9))]
        ours = stats.mann_whitney_u(a, b)
        ref = sps.mannwhitneyu(a, b, alternative="two-sided", method="exact")
        assert ours.exact
        assert ours.u == pytest.approx(ref.statistic)
        assert ours.p_value == pytest.approx(ref.pvalue, abs=1e-12)


def test_exact_p_with_ties_and_failed_runs_matches_permutation() -> None:
    rng = random.Random(11)
    for _ in range(150):
        # coarse values and infinities: many ties, like steps to target on an eval cadence and failed runs
        a = [rng.choice([1.0, 2.0, 2.0, 3.0, INF]) for _ in range(rng.randint(1, 6))]
        b = [rng.choice([1.0, 2.0, 3.0, 4.0, INF, INF]) for _ in range(rng.randint(1, 6))]
        assert stats.mann_whitney_u(a, b).p_value == pytest.approx(_permutation_p(a, b), abs=1e-12)


def test_failed_runs_rank_slowest() -> None:
    base = [10.0, 10.5, 11.0, 9.5, 10.2]
    all_failed = [INF] * 5
    r = stats.mann_whitney_u(all_failed, base)
    assert r.p_value == pytest.approx(2 / math.comb(10, 5))  # as extreme as it gets
    assert r.u == 25  # every failed run is slower than every baseline run
    same = stats.mann_whitney_u([INF] * 3, [INF] * 4)
    assert same.p_value == 1.0


def test_normal_approximation_for_many_runs_matches_scipy() -> None:
    rng = random.Random(3)
    a = [round(rng.gauss(0, 1), 1) for _ in range(40)]  # rounded: ties
    b = [round(rng.gauss(0.4, 1), 1) for _ in range(35)]
    ours = stats.mann_whitney_u(a, b)
    ref = sps.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic", use_continuity=True)
    assert not ours.exact
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9)


def test_min_attainable_p_decides_too_few_seeds() -> None:
    assert stats.min_attainable_p(3, 3) == pytest.approx(0.1)  # can never reach 0.05
    assert stats.min_attainable_p(4, 4) == pytest.approx(2 / 70)
    assert stats.min_attainable_p(5, 5) == pytest.approx(2 / 252)
    assert stats.min_attainable_p(0, 5) == 1.0
    # it is the real minimum: the most extreme split gives exactly that p
    assert stats.mann_whitney_u([1, 2, 3, 4], [5, 6, 7, 8]).p_value == pytest.approx(2 / 70)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^mann_whitney_u: NaN is not a measurement; drop missing values first$"):
        stats.mann_whitney_u([1.0, math.nan], [2.0])
    with pytest.raises(ValueError, match=r"^mann_whitney_u needs at least one value on each side$"):
        stats.mann_whitney_u([], [2.0])


def test_exact_up_to_sixty_runs_then_the_normal_approximation() -> None:
    rng = random.Random(5)
    for a_n, b_n, exact in ((30, 30, True), (31, 30, False)):
        a = [rng.random() for _ in range(a_n)]
        b = [rng.random() + 0.1 for _ in range(b_n)]
        assert stats.mann_whitney_u(a, b).exact is exact, (a_n, b_n)


def test_beyond_the_exact_range_no_difference_is_p_one() -> None:
    """The normal approximation's edge cases: every run tied (all failed: no variance at all), and two samples
    alike (U at its mean, z below 0 after the continuity correction): p is 1, as scipy's."""
    assert stats.mann_whitney_u([INF] * 31, [INF] * 30) == stats.RankTest(1.0, 31 * 30 / 2, False)
    alike = list(range(31))
    ours = stats.mann_whitney_u(alike, alike)
    ref = sps.mannwhitneyu(alike, alike, alternative="two-sided", method="asymptotic", use_continuity=True)
    assert (ours.p_value, ours.u, ours.exact) == (1.0, 31 * 31 / 2, False) and ref.pvalue == pytest.approx(1.0)


def test_olympic_mean_unchanged_for_the_site() -> None:
    assert stats.olympic_mean([5.0, 1.0, 3.0, 100.0]) == 4.0
    assert stats.olympic_mean([1.0, 2.0, 3.0, 4.0, INF]) == 3.0  # one failure is dropped as the slowest
    assert stats.olympic_mean([1.0, 2.0, 3.0, INF, INF]) == INF
    assert stats.olympic_mean([10.0, 1.0, 2.0]) == 2.0  # three runs: the middle one (MLPerf drops both ends)
    assert stats.olympic_mean([1.0, 4.0]) == 2.5 and math.isnan(stats.olympic_mean([]))
    assert stats.spread([3.0, 1.0, 2.0]) == (1.0, 3.0) and all(math.isnan(x) for x in stats.spread([]))

"""compare's verdict logic, one branch at a time, on per-seed figures built in memory (no files, milliseconds).

`compare_metric` (the Mann-Whitney test with the noise floor as its margin), `_ratio`, `too_few_seeds` and
`_compare_pair` (the pair's gate): each test pins one documented rule of docs/compare.md, exactly, so that a
changed comparison or boundary fails here (these are the tests `make mutation` judges compare's mutants by).
"""

from __future__ import annotations

import math

import pytest

from suite.compare import model as compare_model
from suite.compare import tta as cmp
from suite.results.runfiles import Side, SideKey
from suite.results.stats import RunFigures

INF = math.inf
METRIC = {m.name: m for m in compare_model.METRICS}
TTA, SPS = METRIC["time_to_target_s"], METRIC["samples_per_s"]
BASE = [10.0, 10.1, 10.2, 10.3, 10.4, 10.5]
S = compare_model.Settings()


def runs(tta: list[float] | None = None, sps: list[float] | None = None, **fields: list) -> list[RunFigures]:
    """One RunFigures per seed; an infinite time to target is a run that stopped at its budget."""
    n = len(tta if tta is not None else sps if sps is not None else next(iter(fields.values())))
    out = []
    for i in range(n):
        t = tta[i] if tta is not None else None
        out.append(RunFigures(
            run_id=f"r{i}", seed=i, status="budget" if t == INF else "reached",
            time_to_target_s=None if t == INF else t, samples_per_s=sps[i] if sps is not None else None,
            **{k: v[i] for k, v in fields.items()},
        ))
    return out


def judge(base: list[float], cand: list[float], metric: compare_model.Metric = TTA, floor: float = 0.05,
          s: compare_model.Settings = S) -> compare_model.MetricResult:
    side = "tta" if metric is TTA else "sps"
    return cmp.compare_metric(metric, runs(**{side: base}), runs(**{side: cand}), floor, s)


# ---- _ratio --------------------------------------------------------------------------------------------------


def test_ratio_of_infinite_and_undefined_aggregates():
    assert cmp._ratio(12.0, 10.0) == pytest.approx(1.2)
    assert cmp._ratio(INF, 10.0) == INF  # the candidate stopped reaching the target: infinitely worse
    assert cmp._ratio(INF, INF) is None  # both infinite: the ranks decide, not a ratio
    assert cmp._ratio(10.0, INF) == 0.0  # the baseline never reached it, the candidate does
    assert cmp._ratio(10.0, 0.0) is None
    assert cmp._ratio(math.nan, 10.0) is None and cmp._ratio(10.0, math.nan) is None
    assert cmp._ratio(0.0, 10.0) == 0.0


# ---- too few seeds: no verdict that could never have been significant ----------------------------------------


def test_too_few_seeds_needs_min_seeds_on_each_side():
    assert cmp.too_few_seeds(2, 6, S) == "too few seeds: baseline 2, candidate 6; at least 4 each are needed"
    assert cmp.too_few_seeds(6, 2, S) == "too few seeds: baseline 6, candidate 2; at least 4 each are needed"
    four = compare_model.Settings(min_seeds=4)
    assert cmp.too_few_seeds(4, 4, four) is None  # exactly min_seeds is enough (2/C(8,4) = 0.029 < 0.05)
    assert cmp.too_few_seeds(3, 4, four).startswith("too few seeds: baseline 3")


def test_too_few_seeds_when_no_outcome_could_reach_alpha():
    three = compare_model.Settings(min_seeds=3)  # below the default (4), which exists because of this very case
    note = cmp.too_few_seeds(3, 3, three)  # the smallest possible p with 3 and 3 runs is 2/20 = 0.1
    assert note == ("too few seeds: with 3 baseline and 3 candidate runs the smallest possible p-value is 0.100 > "
                    "alpha 0.05, so no change could ever be detected (use e.g. 5 seeds each)")
    assert cmp.too_few_seeds(3, 3, compare_model.Settings(alpha=0.1, min_seeds=3)) is None  # attainable p == alpha: a verdict is possible


def test_too_few_seeds_boundary_four_and_three():
    # 2 / C(7, 3) = 0.0571 > 0.05: still too few; 2 / C(8, 4) = 0.0286: enough
    assert cmp.too_few_seeds(4, 3, S) is not None
    assert cmp.too_few_seeds(4, 4, S) is None


def test_a_metric_with_too_few_seeds_is_not_comparable_and_shows_the_figures():
    r = judge(BASE[:2], BASE)
    assert r.verdict == compare_model.NOT_COMPARABLE and r.note.startswith("too few seeds: baseline 2, candidate 6")
    assert r.baseline == compare_model.Summary(2, 10.05, 10.05, 10.0, 10.1) and r.candidate.n == 6
    assert r.ratio is None and r.p_value is None


# ---- missing figures ---------------------------------------------------------------------------------------


def test_a_metric_not_measured_on_one_side_is_named_not_judged():
    base = runs(sps=[float(x) for x in BASE])
    no_sps = runs(tta=BASE)
    r = cmp.compare_metric(SPS, base, no_sps, 0.05, S)
    assert (r.verdict, r.note) == (compare_model.NOT_COMPARABLE, "not measured on the candidate side")
    assert r.baseline == compare_model.Summary(6, 10.25, 10.25, 10.0, 10.5) and r.candidate is None
    r = cmp.compare_metric(SPS, no_sps, base, 0.05, S)
    assert (r.note, r.baseline, r.candidate.n) == ("not measured on the baseline side", None, 6)
    r = cmp.compare_metric(SPS, no_sps, no_sps, 0.05, S)
    assert (r.verdict, r.note) == (compare_model.NOT_COMPARABLE, "not measured on the baseline and candidate side")


def test_nan_figures_count_as_not_measured():
    nan = runs(sps=[math.nan] * 6)
    r = cmp.compare_metric(SPS, runs(sps=BASE), nan, 0.05, S)
    assert (r.verdict, r.note, r.candidate) == (compare_model.NOT_COMPARABLE, "not measured on the candidate side", None)
    some_nan = runs(sps=[*BASE, math.nan])  # the NaN seed is dropped, the six others are judged
    assert cmp.compare_metric(SPS, runs(sps=BASE), some_nan, 0.05, S).candidate.n == 6


def test_no_run_reached_on_either_side_is_not_comparable():
    r = judge([INF] * 5, [INF] * 5)
    assert (r.verdict, r.note) == (compare_model.NOT_COMPARABLE, "no run reached the target on either side")
    assert r.ratio is None and r.p_value is None and r.baseline.center == INF


# ---- the verdicts -------------------------------------------------------------------------------------------


def test_a_clear_slowdown_regresses_with_the_exact_p_value():
    r = judge(BASE, [x * 1.2 for x in BASE])
    assert (r.verdict, r.note) == (compare_model.REGRESSED, "")
    assert r.ratio == pytest.approx(1.2) and r.exact is True
    assert r.p_value == pytest.approx(2 / math.comb(12, 6)) == r.p_any_change  # complete separation
    assert r.baseline == compare_model.Summary(6, pytest.approx(10.25), pytest.approx(10.25), 10.0, 10.5)
    assert r.candidate.center == pytest.approx(12.3) and r.gating and r.lower_is_better
    assert (r.name, r.label, r.unit) == ("time_to_target_s", "time to target", "s")


def test_a_clear_speed_up_improves():
    r = judge(BASE, [x * 0.8 for x in BASE])
    assert (r.verdict, r.note) == (compare_model.IMPROVED, "") and r.ratio == pytest.approx(0.8)


def test_higher_is_better_metrics_turn_the_direction_round():
    assert judge(BASE, [x * 0.8 for x in BASE], SPS).verdict == compare_model.REGRESSED  # throughput fell
    r = judge(BASE, [x * 1.2 for x in BASE], SPS)
    assert r.verdict == compare_model.IMPROVED and not r.gating and not r.lower_is_better


def test_identical_runs_are_no_change_without_a_note():
    r = judge(BASE, list(BASE))
    assert (r.verdict, r.note, r.ratio, r.p_value, r.p_any_change) == (compare_model.SAME, "", 1.0, 1.0, 1.0)


def test_noise_is_no_change_without_a_note():
    r = judge(BASE, [x * 1.001 for x in BASE])
    assert (r.verdict, r.note, r.p_value) == (compare_model.SAME, "", 1.0)
    assert r.p_any_change > S.alpha


def test_a_significant_change_smaller_than_the_floor_is_no_change_and_says_so():
    r = judge(BASE, [x * 1.03 for x in BASE])
    assert r.verdict == compare_model.SAME and r.p_value == 1.0  # moved by the floor, the candidate is no longer slower
    assert r.p_any_change == pytest.approx(0.0173, abs=1e-4)  # but the plain test sees a change
    assert r.note == "a change is significant (p 0.0173), one beyond the 5% noise floor is not"
    at_alpha = judge(BASE, [x * 1.03 for x in BASE], s=compare_model.Settings(alpha=r.p_any_change))
    assert at_alpha.note.startswith("a change is significant")  # p exactly alpha is significant


def test_the_floor_is_the_margin_of_the_test():
    slower = [x * 1.2 for x in BASE]  # separated from the baseline until moved back by more than ~15%
    assert judge(BASE, slower, floor=0.05).verdict == compare_model.REGRESSED
    r = judge(BASE, slower, floor=0.25)
    assert r.verdict == compare_model.SAME and r.note.endswith("one beyond the 25% noise floor is not")
    faster = [x / 1.2 for x in BASE]
    assert judge(BASE, faster, floor=0.05).verdict == compare_model.IMPROVED
    r = judge(BASE, faster, floor=0.25)
    assert r.verdict == compare_model.SAME and r.note.endswith("one beyond the 25% noise floor is not")


def test_a_faster_candidate_is_moved_up_by_the_floor_not_down():
    # 8% faster, 5% floor: moved UP by 5% the runs overlap the baseline again -> no change beyond the floor
    # (moving them down instead would call it improved)
    r = judge(BASE, [x / 1.08 for x in BASE])
    assert r.p_any_change <= S.alpha and r.p_value > S.alpha
    assert (r.verdict, r.note) == (compare_model.SAME, "a change is significant (p 0.00216), one beyond the 5% noise floor is not")


def test_the_margin_moves_the_candidate_towards_the_baseline_on_both_sides():
    # 10% faster with a 3% floor: moved up by 3% the candidate is still faster -> improved, p of the moved runs
    r = judge(BASE, [x * 0.9 for x in BASE], floor=0.03)
    assert r.verdict == compare_model.IMPROVED and r.p_value == pytest.approx(2 / math.comb(12, 6))


def test_ranks_beyond_the_floor_but_aggregates_within_it_are_no_change():
    # the baseline's olympic mean is lifted by one slow seed: the centres differ by 2%, the ranks by more than 5%
    base = [10.0 + 0.01 * i for i in range(8)] + [20.0, 21.0]
    cand = [11.0 + 0.01 * i for i in range(10)]
    r = judge(base, cand)
    assert r.p_value <= S.alpha and abs(r.badness) <= math.log1p(0.05)
    assert (r.verdict, r.note) == (compare_model.SAME, "within the 5% noise floor")


def test_a_zero_floor_still_calls_equal_aggregates_no_change():
    # equal olympic means (11.25 both, ratio exactly 1) although the ranks differ: |badness| 0 <= log1p(0)
    r = judge([10.0] * 8 + [20.0, 20.0], [11.25] * 10, floor=0.0)
    assert r.ratio == 1.0 and r.p_value <= S.alpha
    assert (r.verdict, r.note) == (compare_model.SAME, "within the 0% noise floor")


def test_ranks_and_aggregate_disagreeing_on_the_direction_is_no_change():
    # 15 of 20 candidate seeds beat every baseline seed, but five very slow ones lift its olympic mean
    r = judge([100.0 + i for i in range(20)], [50.0] * 15 + [1000.0] * 5)
    assert r.p_value <= S.alpha and r.badness > 0
    assert (r.verdict, r.note) == (compare_model.SAME, "the ranks and the aggregate disagree on the direction")


def test_a_candidate_that_stops_reaching_the_target_regresses_infinitely():
    r = judge(BASE, [INF] * 6)
    assert r.verdict == compare_model.REGRESSED and r.ratio == INF and r.badness == INF


def test_a_baseline_that_never_reached_and_a_candidate_that_does_improves():
    r = judge([INF] * 6, BASE)
    assert (r.verdict, r.ratio, r.note) == (compare_model.IMPROVED, 0.0, "")


def test_both_aggregates_infinite_the_ranks_decide():
    mostly = [10.0 + 0.1 * i for i in range(12)] + [INF] * 2  # 2 of 14 failed: olympic mean already infinite
    rarely = [10.0, 10.1] + [INF] * 12
    r = judge(mostly, rarely)
    assert r.ratio is None and r.verdict == compare_model.REGRESSED and r.p_value <= S.alpha
    assert r.note == "ratio undefined: both aggregates are infinite (too many runs did not reach the target)"
    assert judge(mostly, rarely, s=compare_model.Settings(alpha=r.p_value)).verdict == compare_model.REGRESSED  # p == alpha counts
    assert judge(rarely, mostly).verdict == compare_model.IMPROVED
    r = judge(mostly, list(mostly))
    assert (r.verdict, r.p_value) == (compare_model.SAME, 1.0) and r.note.startswith("ratio undefined")
    assert judge(mostly, [10.0, 10.1, 10.2, 10.3] + [INF] * 10).verdict == compare_model.SAME  # not significant


def test_many_runs_a_small_consistent_speed_up_improves():
    # 100 runs a side (the normal approximation): 1% faster, zero floor. U is 40% of the pairs: below half,
    # so the candidate is the faster side (a U of 40% must not count as "larger")
    base = [10 + 0.01 * i for i in range(100)]
    r = judge(base, [x * 0.99 for x in base], floor=0.0)
    assert r.exact is False and r.p_value <= S.alpha
    assert (r.verdict, r.note) == (compare_model.IMPROVED, "")


def test_a_p_value_exactly_at_alpha_is_significant():
    s = compare_model.Settings(alpha=2 / math.comb(10, 5))  # the smallest p with 5 and 5 runs: complete separation
    r = judge(BASE[:5], [x * 1.2 for x in BASE[:5]], s=s)
    assert r.p_value == s.alpha and r.verdict == compare_model.REGRESSED
    r = judge(BASE[:5], [x * 1.2 for x in BASE[:5]], s=compare_model.Settings(alpha=s.alpha * 0.999))
    assert r.verdict == compare_model.NOT_COMPARABLE  # alpha below the smallest attainable p: too few seeds


# ---- the pair: the baseline's floor, gating metrics, good news only when TTA did not get worse ----------------


KEY = SideKey("cpu-test", "cv/digits_cnn", "torch")


def side(figures: list[RunFigures], floor: float | None = None, spec: str = "h1") -> Side:
    s = Side(KEY)
    s.by_spec[spec] = figures
    s.noise_floor[spec] = floor
    s.workload_version[spec] = 1
    return s


def pair(base: Side, cand: Side, s: compare_model.Settings = S) -> compare_model.PairReport:
    return cmp._compare_pair(KEY, base, cand, "h1", s)


def test_a_pair_regresses_when_a_gating_metric_regresses():
    p = pair(side(runs(tta=BASE)), side(runs(tta=[x * 1.2 for x in BASE])))
    assert p.verdict == compare_model.REGRESSED and (p.noise_floor, p.noise_floor_source) == (0.05, "default")
    assert (p.hardware, p.workload, p.backend) == ("cpu-test", "cv/digits_cnn", "torch")
    assert p.metric("time_to_target_s").verdict == compare_model.REGRESSED and p.reason == ""
    assert (p.baseline.runs, p.baseline.reached, p.candidate.runs) == (6, 6, 6)
    # attributed: neither steps to target nor time per step was measured here, so neither factor alone
    assert p.cause == "neither factor alone (evaluation time, overhead, or changes below the test's power)"


def test_a_non_gating_metric_never_decides_the_pair():
    p = pair(side(runs(tta=BASE, mfu=[0.5] * 6)), side(runs(tta=BASE, mfu=[0.3] * 6)))
    assert p.metric("mfu").verdict == compare_model.REGRESSED and not p.metric("mfu").gating
    assert p.verdict == compare_model.SAME and p.cause is None


def test_the_pair_improves_on_a_gating_improvement():
    p = pair(side(runs(tta=BASE)), side(runs(tta=[x * 0.8 for x in BASE])))
    assert p.verdict == compare_model.IMPROVED


def test_no_good_news_when_time_to_target_looks_worse():
    # time per step improves (gating), time to target is 8% worse but not significantly beyond the floor
    base = runs(tta=BASE, time_per_step_s=[0.010] * 6)
    cand = runs(tta=[11.0, 10.0, 12.0, 10.4, 11.5, 10.6], time_per_step_s=[0.008] * 6)
    p = pair(side(base), side(cand))
    assert p.metric("time_per_step_s").verdict == compare_model.IMPROVED
    tta = p.metric("time_to_target_s")
    assert tta.verdict == compare_model.SAME and tta.badness > math.log1p(0.05)
    assert p.verdict == compare_model.SAME
    assert not cmp._tta_looks_worse(pair(side(base), side(runs(tta=BASE, time_per_step_s=[0.008] * 6))))


def test_the_tta_looks_worse_boundary_is_the_floor():
    p = pair(side(runs(tta=BASE)), side(runs(tta=BASE)))
    m = p.metric("time_to_target_s")
    m.ratio = 1.05  # just beyond log1p(0.05) (1.05 is not exactly representable: 1.0500000000000000444)
    assert cmp._tta_looks_worse(p)
    m.ratio = 1.0 + 0.05 * (1 - 1e-9)
    assert not cmp._tta_looks_worse(p)
    p.noise_floor, m.ratio = 0.0, 1.0  # badness 0 == log1p(0): not worse (the comparison is strict)
    assert not cmp._tta_looks_worse(p)
    p.metrics = [x for x in p.metrics if x.name != "time_to_target_s"]
    assert not cmp._tta_looks_worse(p)


def test_the_baselines_floor_wins_over_the_candidates_and_the_default():
    slower = [x * 1.08 for x in BASE]
    p = pair(side(runs(tta=BASE), floor=0.10), side(runs(tta=slower), floor=0.01))
    assert (p.noise_floor, p.noise_floor_source, p.verdict) == (0.10, "spec", compare_model.SAME)
    assert p.floor_note.startswith("the candidate's own noise floor 0.01 was ignored: the baseline's (0.1) wins")
    p = pair(side(runs(tta=BASE), floor=0.0), side(runs(tta=slower)))
    assert (p.noise_floor, p.noise_floor_source, p.verdict) == (0.0, "spec", compare_model.REGRESSED)  # 0 is a floor
    assert p.floor_note == ""
    p = pair(side(runs(tta=BASE)), side(runs(tta=slower)), compare_model.Settings(default_noise_floor=0.10))
    assert (p.noise_floor, p.noise_floor_source, p.verdict) == (0.10, "default", compare_model.SAME)


def test_a_pair_with_too_few_seeds_is_not_comparable():
    p = pair(side(runs(tta=BASE[:2])), side(runs(tta=BASE)))
    assert p.verdict == compare_model.NOT_COMPARABLE and p.reason.startswith("too few seeds: baseline 2")
    assert len(p.metrics) == len(compare_model.METRICS)


def test_a_pair_of_mixed_configurations_is_not_comparable_and_judges_no_metric():
    base, cand = side(runs(tta=BASE)), side(runs(tta=[x * 1.2 for x in BASE]))
    base.comparison["h1"] = [{"precision": "fp32"}] * 6
    cand.comparison["h1"] = [{"precision": "bf16"}] * 6
    p = pair(base, cand)
    assert p.verdict == compare_model.NOT_COMPARABLE and p.reason.startswith("different configuration")
    assert {m.verdict for m in p.metrics} == {compare_model.NOT_COMPARABLE}
    assert all(m.note == p.reason and m.ratio is None and m.p_value is None and m.p_any_change is None
               for m in p.metrics)
    assert p.metric("time_to_target_s").baseline.n == 6  # the figures are still shown


def test_host_load_is_warned_per_side():
    loaded = runs(tta=BASE, host_load=["load 9 on 2 cores"] * 6)
    p = pair(side(runs(tta=BASE)), side(loaded))
    assert p.warnings == ["candidate: 6 of 6 run(s) on a busy host (load 9 on 2 cores)"]

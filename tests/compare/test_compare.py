"""compare on constructed result sets: real Result objects written with write_result, read back from disk."""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path

import pytest
from scipy.stats import binom

from benchmarks.sim.results import noisy_runs, simulated_result, write_all
from suite.compare import model as compare_model
from suite.compare import output as compare_output
from suite.compare import tta as cmp
from suite.results import stats
from suite.results.runfiles import Loaded, record_of_result, sides


def run_compare(tmp_path: Path, base, cand, **settings) -> compare_model.Report:
    write_all(tmp_path / "base", base)
    write_all(tmp_path / "cand", cand)
    return cmp.compare([tmp_path / "base"], [tmp_path / "cand"], compare_model.Settings(**settings))


def only_pair(report: compare_model.Report) -> compare_model.PairReport:
    assert len(report.pairs) == 1, [p.reason for p in report.pairs]
    return report.pairs[0]


def test_clear_regression(tmp_path: Path) -> None:
    rng = random.Random(1)
    report = run_compare(tmp_path, noisy_runs(rng, 5), noisy_runs(rng, 5, time_per_step_s=0.015, steps=1500))
    pair = only_pair(report)
    tta = pair.metric("time_to_target_s")
    assert pair.verdict == "regressed" and tta.verdict == "regressed"
    assert tta.ratio == pytest.approx(2.25, rel=0.15)
    assert tta.p_value == pytest.approx(2 / 252)  # complete separation of 5 vs 5
    assert pair.cause == "both"
    assert report.exit_code == compare_model.EXIT_REGRESSION


def test_clear_improvement(tmp_path: Path) -> None:
    rng = random.Random(2)
    report = run_compare(tmp_path, noisy_runs(rng, 5), noisy_runs(rng, 5, time_per_step_s=0.007, cv_steps=0.01))
    pair = only_pair(report)
    assert pair.verdict == "improved"
    assert pair.metric("time_to_target_s").verdict == "improved"
    assert pair.metric("samples_per_s").verdict == "improved"  # higher is better: direction handled
    assert pair.cause == "throughput"
    assert report.exit_code == compare_model.EXIT_OK


def test_pure_noise_is_no_significant_change(tmp_path: Path) -> None:
    rng = random.Random(3)
    report = run_compare(tmp_path, noisy_runs(rng, 5), noisy_runs(rng, 5))
    pair = only_pair(report)
    assert pair.verdict == "no significant change"
    assert all(m.verdict in ("no significant change", "not comparable") for m in pair.metrics)
    assert pair.metric("energy_j").verdict == "not comparable"  # never measured: said, not hidden
    assert report.exit_code == compare_model.EXIT_OK


def _noise_sides(rng: random.Random, n: int, **kw):
    base = sides(Loaded([record_of_result(r, "b") for r in noisy_runs(rng, n, **kw)], [], [], n))
    cand = sides(Loaded([record_of_result(r, "c") for r in noisy_runs(rng, n, **kw)], [], [], n))
    return base, cand


@pytest.mark.parametrize("n", [5, 8])
def test_false_alarm_rate_at_most_alpha(n: int) -> None:
    """Under pure noise (same distribution both sides, 10% of runs failing), over 400 simulated PRs the share
    of metric verdicts other than "no significant change" stays at or below alpha. Noise floor 0 isolates the
    test's own level; the default floor only makes false alarms rarer, which the last assertion checks.

    400 sets estimate a rate to +-1.1 points, so the per-metric check allows the Monte Carlo error of a true
    rate of exactly alpha (its 99.9th percentile); test_exact_level_is_at_most_alpha checks the level exactly."""
    alpha, sets = 0.05, 400
    mc_limit = binom.ppf(0.999, sets, alpha)  # 34 of 400: a test with a true rate of 8% or more fails here
    rng = random.Random(1234 + n)
    strict = compare_model.Settings(alpha=alpha, default_noise_floor=0.0)
    default = compare_model.Settings(alpha=alpha)
    alarms = {name: 0 for name in ("time_to_target_s", "steps_to_target", "time_per_step_s")}
    regress_alarms = gate_alarms_default = 0
    for _ in range(sets):
        base, cand = _noise_sides(rng, n, cv_steps=0.08, cv_time=0.05, fail_p=0.1)
        (pair,) = cmp.compare_sides(base, cand, strict)
        for name in alarms:
            alarms[name] += pair.metric(name).verdict in ("regressed", "improved")
        regress_alarms += pair.metric("time_to_target_s").verdict == "regressed"
        (pair_default,) = cmp.compare_sides(base, cand, default)
        gate_alarms_default += pair_default.verdict == "regressed"
    for name, count in alarms.items():
        assert count <= mc_limit, (name, count)
    assert sum(alarms.values()) / (3 * sets) <= alpha  # pooled over the three metrics
    assert regress_alarms / sets <= alpha / 2  # one tail of a two-sided test
    assert gate_alarms_default / sets <= alpha


@pytest.mark.parametrize("n", [5, 8])
def test_a_change_at_the_noise_floor_is_rarely_a_regression(n: int) -> None:
    """The verdict's test has the floor as margin: a true slowdown of exactly the floor (5%) must be called a
    regression in at most alpha / 2 of PRs, and a true slowdown of 25% (5x the floor) mostly is."""
    alpha, sets = 0.05, 300
    rng = random.Random(99 + n)
    at_floor = twice = 0
    for _ in range(sets):
        base = sides(Loaded([record_of_result(r, "b") for r in noisy_runs(rng, n, cv_time=0.03)], [], [], n))
        same = sides(Loaded([record_of_result(r, "c") for r in noisy_runs(rng, n, cv_time=0.03,
                                                                          time_per_step_s=0.0105)], [], [], n))
        slow = sides(Loaded([record_of_result(r, "c") for r in noisy_runs(rng, n, cv_time=0.03,
                                                                          time_per_step_s=0.0125)], [], [], n))
        (p,) = cmp.compare_sides(base, same, compare_model.Settings(alpha=alpha))
        at_floor += p.metric("time_per_step_s").verdict == "regressed"
        (p,) = cmp.compare_sides(base, slow, compare_model.Settings(alpha=alpha))
        twice += p.metric("time_per_step_s").verdict == "regressed"
    assert at_floor <= binom.ppf(0.999, sets, alpha / 2), at_floor
    assert twice / sets > 0.5, twice


@pytest.mark.parametrize("n", [4, 5, 6, 8, 10])
def test_exact_level_is_at_most_alpha(n: int) -> None:
    """The exact size of the verdict rule, from the test's null distribution (every split equally likely)."""
    alpha = 0.05
    pool = list(range(2 * n))
    splits = list(itertools.combinations(pool, n))
    sample = splits[:: max(1, len(splits) // 3000)]  # every split for n <= 6, an even sample above
    rejected = sum(stats.mann_whitney_u(list(c), [x for x in pool if x not in c]).p_value <= alpha for c in sample)
    assert rejected / len(sample) <= alpha
    assert rejected > 0  # and the rule can fire at all at this n


def test_convergence_regression_is_named(tmp_path: Path) -> None:
    rng = random.Random(4)
    report = run_compare(tmp_path, noisy_runs(rng, 5, cv_time=0.01),
                         noisy_runs(rng, 5, steps=1400, cv_time=0.01))
    pair = only_pair(report)
    assert pair.verdict == "regressed"
    assert pair.cause == "convergence"
    assert pair.metric("steps_to_target").verdict == "regressed"
    assert pair.metric("time_per_step_s").verdict == "no significant change"
    assert re.match(r"steps to target x1\.[34]\d* \(regressed\); time per step x(0\.9|1\.0)", pair.cause_detail)


def test_throughput_regression_is_named(tmp_path: Path) -> None:
    rng = random.Random(5)
    report = run_compare(tmp_path, noisy_runs(rng, 5, cv_steps=0.01), noisy_runs(rng, 5, cv_steps=0.01, time_per_step_s=0.012))
    pair = only_pair(report)
    assert pair.verdict == "regressed" and pair.cause == "throughput"
    assert pair.metric("time_per_step_s").verdict == "regressed"
    assert pair.metric("samples_per_s").verdict == "regressed"
    assert pair.metric("steps_to_target").verdict == "no significant change"


def test_throughput_regression_fails_the_gate_even_when_tta_is_noisy(tmp_path: Path) -> None:
    rng = random.Random(6)
    report = run_compare(tmp_path, noisy_runs(rng, 5, cv_steps=0.3, cv_time=0.005),
                         noisy_runs(rng, 5, cv_steps=0.3, cv_time=0.005, time_per_step_s=0.0115))
    pair = only_pair(report)
    assert pair.metric("time_per_step_s").verdict == "regressed"
    assert pair.verdict == "regressed" and report.exit_code == 1


def test_failed_runs_count_as_infinitely_slow(tmp_path: Path) -> None:
    rng = random.Random(7)
    cand = noisy_runs(rng, 5, steps=1300)
    for r in cand[:3]:  # three of five never reach the target: the olympic mean is infinite
        r.status, r.time_to_target_s, r.steps_to_target = "budget", None, None
    report = run_compare(tmp_path, noisy_runs(rng, 5), cand)
    pair = only_pair(report)
    tta = pair.metric("time_to_target_s")
    assert tta.candidate.center == float("inf") and tta.ratio == float("inf")
    assert tta.candidate.n == 5  # failed runs are counted, never dropped
    assert pair.verdict == "regressed" and pair.cause == "convergence"
    assert pair.candidate.success_rate == pytest.approx(0.4)
    assert "success rate 100% -> 40%" in pair.cause_detail
    assert '"inf"' in json.dumps(compare_output.to_json(report), allow_nan=False)  # JSON has no Infinity: "inf"


def test_failures_never_look_like_an_improvement(tmp_path: Path) -> None:
    """Two fast runs and three failures: dropping the failures would read as 30% faster; as infinitely slow
    runs they make the aggregate infinite, and the exact test (3 of 10 pooled runs failed) is not significant."""
    rng = random.Random(8)
    cand = noisy_runs(rng, 5, time_per_step_s=0.007)
    for r in cand[:3]:
        r.status, r.time_to_target_s, r.steps_to_target = "diverged", None, None
    pair = only_pair(run_compare(tmp_path, noisy_runs(rng, 5), cand))
    tta = pair.metric("time_to_target_s")
    assert tta.verdict == "no significant change" and tta.ratio == float("inf")
    assert pair.verdict != "improved"


def test_mismatched_specs_are_reported_not_skipped(tmp_path: Path) -> None:
    rng = random.Random(8)
    report = run_compare(tmp_path, noisy_runs(rng, 5), noisy_runs(rng, 5, spec_hash="changed1"))
    pair = only_pair(report)
    assert pair.verdict == "not comparable"
    assert "different spec hash" in pair.reason and "changed1" in pair.reason and "spec0001" in pair.reason
    assert pair.metric("time_to_target_s").candidate.n == 5  # the candidate's figures are still shown
    assert report.exit_code == compare_model.EXIT_ERROR  # nothing comparable


def test_other_hardware_and_missing_pairs_are_reported(tmp_path: Path) -> None:
    rng = random.Random(9)
    base = noisy_runs(rng, 5) + noisy_runs(rng, 5, workload="nlp/gone")
    cand = noisy_runs(rng, 5) + noisy_runs(rng, 5, hardware="nvidia-h200-x1") + noisy_runs(rng, 5, workload="gnn/new")
    report = run_compare(tmp_path, base, cand)
    reasons = {(p.workload, p.hardware): (p.verdict, p.reason) for p in report.pairs}
    assert reasons[("cv/digits_cnn", "cpu-test-2c")][0] == "no significant change"
    verdict, reason = reasons[("cv/digits_cnn", "nvidia-h200-x1")]
    assert verdict == "not comparable" and "no baseline on this hardware" in reason and "cpu-test-2c" in reason
    verdict, reason = reasons[("gnn/new", "cpu-test-2c")]
    assert verdict == "not comparable" and "no baseline for this workload and backend" in reason
    verdict, reason = reasons[("nlp/gone", "cpu-test-2c")]
    assert verdict == "not comparable" and "no candidate runs" in reason
    assert report.exit_code == compare_model.EXIT_OK  # something was comparable and nothing regressed


@pytest.mark.parametrize(("n_base", "n_cand"), [(5, 2), (3, 3)])
def test_too_few_seeds(tmp_path: Path, n_base: int, n_cand: int) -> None:
    rng = random.Random(10)
    report = run_compare(tmp_path, noisy_runs(rng, n_base), noisy_runs(rng, n_cand, time_per_step_s=0.03))
    pair = only_pair(report)
    assert pair.verdict == "not comparable" and "too few seeds" in pair.reason  # even a 3x slowdown
    assert report.exit_code == compare_model.EXIT_ERROR


def test_noise_floor_from_spec_beats_the_default(tmp_path: Path) -> None:
    rng = random.Random(11)
    base = noisy_runs(rng, 6, cv_steps=0.005, cv_time=0.005, noise_floor=0.15)
    cand = noisy_runs(rng, 6, cv_steps=0.005, cv_time=0.005, noise_floor=0.15, time_per_step_s=0.011)
    pair = only_pair(run_compare(tmp_path, base, cand))
    tps = pair.metric("time_per_step_s")
    assert pair.noise_floor == 0.15 and pair.noise_floor_source == "spec"
    assert tps.p_any_change < 0.01 and tps.p_value > 0.05  # a real change, but not one beyond the floor
    assert tps.verdict == "no significant change" and "15% noise floor" in tps.note
    # the same 10% slowdown without a floor in the spec: the 5% default applies and it regresses
    for r in (*base, *cand):
        r.config = {"spec": {"compare": {"noise_floor": None}}}
        r.run_id += "x"
    pair = only_pair(run_compare(tmp_path / "again", base, cand))
    assert pair.noise_floor_source == "default" and pair.metric("time_per_step_s").verdict == "regressed"


def test_bad_files_are_named_and_skipped_or_fatal_under_strict(tmp_path: Path) -> None:
    rng = random.Random(12)
    write_all(tmp_path / "base", noisy_runs(rng, 5))
    write_all(tmp_path / "cand", noisy_runs(rng, 5))
    (tmp_path / "cand" / "truncated.json").write_text('{"schema_version": 1, "run_id": ')
    good = simulated_result(99, steps_to_target=10, time_per_step_s=0.01).model_dump(mode="json")
    good["steps"] = "many"
    (tmp_path / "cand" / "wrong-type.json").write_text(json.dumps(good))
    report = cmp.compare([tmp_path / "base"], [tmp_path / "cand"])
    assert len(report.errors) == 2
    assert any("truncated.json" in e and "not valid JSON" in e for e in report.errors)
    assert any("wrong-type.json" in e and "steps" in e for e in report.errors)
    assert only_pair(report).verdict == "no significant change"
    assert "2 bad file(s) skipped" in compare_output.to_markdown(report)
    with pytest.raises(ValueError, match="truncated.json"):
        cmp.compare([tmp_path / "base"], [tmp_path / "cand"], strict=True)


def test_markdown_orders_by_severity_and_json_has_the_documented_fields(tmp_path: Path) -> None:
    rng = random.Random(13)
    base = [*noisy_runs(rng, 5, workload="cv/a"), *noisy_runs(rng, 5, workload="cv/b"),
            *noisy_runs(rng, 5, workload="cv/c"), *noisy_runs(rng, 5, workload="cv/d")]
    cand = [*noisy_runs(rng, 5, workload="cv/a", time_per_step_s=0.007),  # improved
            *noisy_runs(rng, 5, workload="cv/b", time_per_step_s=0.013),  # regressed a little
            *noisy_runs(rng, 5, workload="cv/c", time_per_step_s=0.03),  # regressed a lot
            *noisy_runs(rng, 5, workload="cv/d", spec_hash="other")]  # not comparable
    report = run_compare(tmp_path, base, cand)
    order = [(p.workload, p.verdict) for p in report.pairs]
    assert order == [("cv/c", "regressed"), ("cv/b", "regressed"), ("cv/d", "not comparable"), ("cv/a", "improved")]
    md = compare_output.to_markdown(report)
    first, rest = md.split("\n", 3)[2], md
    assert first.startswith("🔴 **2 regressions** in 4 comparison(s)")
    assert rest.index("`cv/c`") < rest.index("`cv/b`") < rest.index("`cv/d`") < rest.index("`cv/a`")
    assert "<details>" in md and "</details>" in md
    data = json.loads(json.dumps(compare_output.to_json(report), allow_nan=False))
    assert data["kind"] == "trainbench-compare" and data["schema_version"] == 1
    assert data["summary"] == {"regressed": 2, "not_comparable": 1, "improved": 1, "no_significant_change": 0,
                               "suspicious": 0, "no_change": 0,
                               "pairs": 4, "exit_code": 1, "baseline_files": 20, "candidate_files": 20, "bad_files": 0,
                               "left_out": 0}
    pair = data["pairs"][0]
    assert {"hardware", "workload", "backend", "verdict", "reason", "cause", "cause_detail", "noise_floor",
            "noise_floor_source", "baseline", "candidate", "metrics"} <= set(pair)
    m = pair["metrics"][0]
    assert m["name"] == "time_to_target_s" and {"ratio", "p_value", "verdict", "baseline", "candidate", "gating"} <= set(m)


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="gate metric"):
        compare_model.Settings(gate=("time_to_targett",))
    with pytest.raises(ValueError, match="alpha"):
        compare_model.Settings(alpha=1.5)


def test_markdown_fits_a_github_comment(tmp_path: Path) -> None:
    rng = random.Random(14)
    base, cand = [], []
    for w in range(120):
        base += noisy_runs(rng, 5, workload=f"cv/w{w:03d}")
        cand += noisy_runs(rng, 5, workload=f"cv/w{w:03d}", time_per_step_s=0.02 if w == 7 else 0.01)
    bs = sides(Loaded([record_of_result(r, "b") for r in base], [], [], 0))
    cs = sides(Loaded([record_of_result(r, "c") for r in cand], [], [], 0))
    report = compare_model.Report(compare_model.Settings(), cmp.compare_sides(bs, cs, compare_model.Settings()), [], 600, 600)
    md = compare_output.to_markdown(report, max_chars=12_000)
    assert len(md) <= 12_000
    assert "`cv/w007`" in md.split("<details>")[0]  # the regression is never the part that is cut
    assert "more (least severe): see the JSON report" in md and "</details>" in md
    assert len(compare_output.to_markdown(report)) > 12_000  # the default limit (60,000) keeps more

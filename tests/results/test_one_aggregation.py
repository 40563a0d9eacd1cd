"""One aggregation (suite.results.stats.aggregate): a leaderboard row and a promoted baseline of the same runs agree."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from benchmarks.sim.results import simulated_result, write_all
from suite.results import baseline_schema, stats
from suite.results import baselines as bl
from suite.results.record import load_results
from suite.site.baselines import load_baselines
from suite.site.build import build_site
from suite.site.data import RunRow, submissions

STEPS = [900, 1000, 1100, 1200, 1300]


def _runs(missed: int) -> list:
    """Five seeds; the last `missed` of them never reach the target (status budget)."""
    out = []
    for seed, steps in enumerate(STEPS):
        miss = seed >= len(STEPS) - missed
        out.append(simulated_result(seed, steps_to_target=None if miss else steps, time_per_step_s=0.01 + 0.001 * seed,
                               status="budget" if miss else "reached", run_id=f"run{seed}"))
    return out


def _promote(results: Path, to: Path) -> Path:
    loaded = bl.load_paths([results], validate=True)
    (b,) = bl.build_baselines(loaded.records, min_seeds=3)
    return bl.write_baseline(to, b)


def _row_and_baseline(tmp_path: Path, missed: int) -> tuple[stats.Aggregate, stats.Aggregate, baseline_schema.Baseline]:
    write_all(tmp_path / "res", _runs(missed))
    path = _promote(tmp_path / "res", tmp_path / "baselines")
    loaded = load_results(tmp_path / "res")
    (sub,) = submissions([RunRow.of_result(p.parent, p.name, r) for p, r in loaded.results])
    (site_base,), errors = load_baselines(tmp_path / "baselines")
    assert not errors
    return sub.agg, site_base.agg, baseline_schema.read_baseline(path)


@pytest.mark.parametrize("missed", [0, 1, 2])
def test_leaderboard_row_and_promoted_baseline_show_the_same_figures(tmp_path: Path, missed: int) -> None:
    row, base, stored = _row_and_baseline(tmp_path, missed)
    assert row == base  # every figure: TTA olympic/median/spread, success, steps and time-per-step factors
    assert stored.aggregate == baseline_schema.BaselineAggregate.of(row)  # what the file holds is the same aggregate
    assert row.runs == 5 and row.reached == 5 - missed
    # a missed seed counts as infinite in BOTH factors: steps to target is the median of [900..1200, inf]
    assert row.steps_to_target_median == (sorted(STEPS[: 5 - missed]) + [math.inf] * missed)[2]
    if missed == 2:  # two misses of five: the olympic mean is infinite, stored as null
        assert math.isinf(row.tta_olympic_s) and stored.aggregate.tta_olympic_s is None
    else:
        assert math.isfinite(row.tta_olympic_s) and stored.aggregate.tta_olympic_s == pytest.approx(row.tta_olympic_s)


def test_the_site_shows_the_baseline_figure_it_shows_for_the_row(tmp_path: Path) -> None:
    write_all(tmp_path / "res", _runs(1))
    _promote(tmp_path / "res", tmp_path / "baselines")
    build_site(tmp_path / "res", tmp_path / "out", baselines=tmp_path / "baselines")
    page = next((tmp_path / "out" / "w").glob("*.html")).read_text()
    assert "+0.0%" in page  # the row against the baseline made from the same runs
    row_tta = re.search(r'<td class="num strong"[^>]*>([^<]+)</td>', page)
    baselines = page[page.index("<h2>Baselines</h2>"):]
    base_tta = re.search(r'<td class="num"[^>]*>([^<]+)</td>', baselines)
    assert row_tta and base_tta and row_tta.group(1) == base_tta.group(1)


def test_study_cells_use_the_same_aggregation() -> None:
    from suite.studies import runner as study

    recs = [{"workload": "w", "algorithm": "a", "status": r.status, "time_to_target_s": r.time_to_target_s,
             "steps_to_target": r.steps_to_target, "seed": r.seed, "run_id": r.run_id} for r in _runs(1)]
    scored = study.score(recs, ["a"], 4.0)
    assert scored["times_s"]["w"]["a"] == stats.aggregate_results(_runs(1)).tta_olympic_s


@pytest.mark.parametrize("missed", [0, 1, 2])
def test_compare_centres_are_the_same_aggregate(tmp_path: Path, missed: int) -> None:
    from suite.compare import tta as cmp

    row, _, _ = _row_and_baseline(tmp_path, missed)
    report = cmp.compare([tmp_path / "baselines"], [tmp_path / "res"])
    (pair,) = report.pairs
    expect = {"time_to_target_s": row.tta_olympic_s, "steps_to_target": row.steps_to_target_median,
              "time_per_step_s": row.time_per_step_median_s, "samples_per_s": row.samples_per_s_median,
              "mfu": row.mfu_median, "peak_memory_bytes": row.peak_memory_median_bytes}
    for name, value in expect.items():
        m = pair.metric(name)
        assert m is not None and m.baseline is not None and m.candidate is not None, name
        assert m.baseline.center == m.candidate.center == pytest.approx(value), name


def test_the_fast_path_over_results_is_the_same_aggregation() -> None:
    runs = _runs(1) + _runs(2)
    runs[0].step_time_s = {}  # time per step falls back to train time / steps
    runs[1].throughput, runs[1].mfu, runs[1].memory = {}, None, {}
    runs[2].status = "diverged"  # a time without "reached" does not count
    assert stats.aggregate_results(runs) == stats.aggregate([stats.figures_of(r) for r in runs])
    assert stats.aggregate_results(runs).time_per_step_median_s is not None

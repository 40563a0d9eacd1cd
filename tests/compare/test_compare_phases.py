"""RL post-training results carry their step's time split by phase (`phases`); compare names a change as a rollout
(generation) or a training regression, in Markdown and JSON."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from benchmarks.sim.results import simulated_result, write_all
from suite.compare import model as compare_model
from suite.compare import output
from suite.compare import tta as cmp


def _grpo_runs(rng: random.Random, n: int, gen_s: float, train_s: float, first_seed: int = 0):
    """Runs whose generation and training phases each vary by ~1% run to run (a phase summed over hundreds of steps); the step is their sum."""
    out = []
    for i in range(n):
        gen = gen_s * math.exp(rng.gauss(0, 0.01))
        train = train_s * math.exp(rng.gauss(0, 0.01))
        r = simulated_result(first_seed + i, steps_to_target=200, time_per_step_s=gen + train, workload="rl/arithmetic_grpo")
        r.phases = {"rollout_s_per_step": gen, "training_s_per_step": train, "seconds": {"gen": gen * 200}}
        out.append(r)
    return out


def _compare(tmp_path: Path, base, cand) -> compare_model.Report:
    write_all(tmp_path / "base", base)
    write_all(tmp_path / "cand", cand)
    return cmp.compare([tmp_path / "base"], [tmp_path / "cand"], compare_model.Settings())


def test_generation_slowed_by_ten_percent_is_a_rollout_regression(tmp_path: Path) -> None:
    rng = random.Random(3)
    report = _compare(tmp_path, _grpo_runs(rng, 6, 0.04, 0.03), _grpo_runs(rng, 6, 0.044, 0.03, first_seed=10))
    (pair,) = report.pairs
    assert pair.metric("rollout_s_per_step").verdict == compare_model.REGRESSED
    assert pair.metric("training_s_per_step").verdict != compare_model.REGRESSED
    assert pair.phase == "rollout regression" and pair.verdict == compare_model.REGRESSED
    md = output.to_markdown(report)
    assert "**rollout regression**" in md and "rollout (generation) time per step" in md
    data = json.loads(json.dumps(output.to_json(report)))
    assert data["pairs"][0]["phase"] == "rollout regression"
    assert output.report_from_json(data, "report.json").pairs[0].phase == "rollout regression"


def test_a_slower_update_is_a_training_regression_and_noise_is_neither(tmp_path: Path) -> None:
    rng = random.Random(4)
    slow = _compare(tmp_path / "a", _grpo_runs(rng, 6, 0.04, 0.03), _grpo_runs(rng, 6, 0.04, 0.036, first_seed=10))
    assert slow.pairs[0].phase == "training regression"
    same = _compare(tmp_path / "b", _grpo_runs(rng, 6, 0.04, 0.03), _grpo_runs(rng, 6, 0.04, 0.03, first_seed=10))
    assert same.pairs[0].phase is None


def test_results_without_phases_compare_as_before(tmp_path: Path) -> None:
    rng = random.Random(5)
    base = [simulated_result(i, steps_to_target=100, time_per_step_s=0.01 * math.exp(rng.gauss(0, 0.02))) for i in range(5)]
    cand = [simulated_result(i + 9, steps_to_target=100, time_per_step_s=0.01 * math.exp(rng.gauss(0, 0.02)))
            for i in range(5)]
    (pair,) = _compare(tmp_path, base, cand).pairs
    assert pair.phase is None and pair.metric("rollout_s_per_step").note.startswith("not measured")

"""Issue 48: compare names a significant change in any part of the wall-clock account (Result.goodput)."""

from __future__ import annotations

import random
from pathlib import Path

from benchmarks.sim.results import simulated_result, write_all
from suite.compare import model as compare_model
from suite.compare import tta as cmp
from suite.measure.goodput import PARTS
from suite.results.record import Goodput


def _with_account(seed: int, rng: random.Random, compile_s: float) -> object:
    r = simulated_result(seed, steps_to_target=1000, time_per_step_s=0.01 * (1 + rng.gauss(0, 0.01)))
    parts = dict.fromkeys(PARTS, 0.0)
    parts.update(init_s=2.0 * (1 + rng.gauss(0, 0.02)), steps_s=10.0 * (1 + rng.gauss(0, 0.02)),
                 compile_s=compile_s * (1 + rng.gauss(0, 0.02)))
    wall = sum(parts.values())
    r.goodput = Goodput(wall_s=wall, parts_s=parts, unaccounted_s=0.0, goodput=parts["steps_s"] / wall)
    return r


def _compare(tmp_path: Path, base_compile: float, cand_compile: float, **settings) -> compare_model.PairReport:
    rng = random.Random(7)
    write_all(tmp_path / "base", [_with_account(i, rng, base_compile) for i in range(5)])
    write_all(tmp_path / "cand", [_with_account(i, rng, cand_compile) for i in range(5)])
    (pair,) = cmp.compare([tmp_path / "base"], [tmp_path / "cand"], compare_model.Settings(**settings)).pairs
    return pair


def test_a_compile_time_regression_is_named(tmp_path):
    pair = _compare(tmp_path, 1.0, 3.0)
    m = pair.metric("goodput_compile_s")
    assert m.verdict == "regressed" and 2.5 < m.ratio < 3.5
    assert any(w.startswith("wall clock: compile regressed") for w in pair.warnings), pair.warnings
    assert pair.metric("goodput_init_s").verdict == "no significant change"
    assert pair.verdict == "no significant change"  # not gating by default ...
    gated = _compare(tmp_path / "g", 1.0, 3.0, gate=("time_to_target_s", "goodput_compile_s"))
    assert gated.verdict == "regressed"  # ... and a regression of the gate when asked


def test_no_part_is_named_when_nothing_changed(tmp_path):
    pair = _compare(tmp_path, 1.0, 1.0)
    assert not [w for w in pair.warnings if w.startswith("wall clock")]
    assert pair.metric("goodput_compile_s").verdict == "no significant change"

"""A simulated comparator for `trainbench bisect` (suite/compare/bisect.py): each commit's step is slower by the
product of the slowdowns of the commits up to it; a comparison draws lockstep rounds from tests/support/
benchmarks/sim/ab.py's noise model, writes both sides as throughput result files and decides them with the real gate
(suite.compare.tta.compare at the PR workflow's settings). Only the timing is simulated."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.sim.ab import Noise, simulate, write_sides
from suite.compare import ab_verdict, tta
from suite.compare import model as compare_model
from suite.compare.bisect import Comparator, Decision
from suite.compare.bisect_ab import decision_of

STEPS = 200  # measured steps per run: the gate's simulated power figures (docs/compare.md) use 10 rounds of 200


def levels(commits: Sequence[str], slow_at: dict[int, float]) -> dict[str, float]:
    """Each commit's step time factor: commit i is slowed by every slow_at[j] with j <= i."""
    out, f = {}, 1.0
    for i, c in enumerate(commits):
        f *= slow_at.get(i, 1.0)
        out[c] = f
    return out


def comparator(level: dict[str, float], rng: np.random.Generator, noise: Noise | None = None, steps: int = STEPS,
               files: bool = False, calls: list[str] | None = None) -> Comparator:
    """files: each side written as result files and decided by `compare` itself (the whole path, ~2 s a comparison
    here); else the two functions compare_throughput calls on them (the paired two-level bootstrap interval at
    alpha 0.05, 2,000 resamples, and the verdict at the 1% floor), without the files."""
    s = compare_model.Settings()

    def compare(base: str, head: str, rounds: int) -> Decision:
        if calls is not None:
            calls.append(head)
        b, h = simulate(rng, rounds, steps, level[head] / level[base], noise=noise or Noise())
        if files:
            with tempfile.TemporaryDirectory() as tmp:
                bdir, hdir = write_sides(Path(tmp), b, h)
                return decision_of(tta.compare([bdir], [hdir], s), "cv/digits_cnn", "step_time")
        iv = ab_verdict.ratio_interval(b, h, s.alpha, s.n_boot, paired=True)
        verdict, note = ab_verdict.verdict(iv, s.throughput_noise_floor)
        return Decision(verdict, iv.ratio, iv.ci_low, iv.ci_high, None, note)

    return compare

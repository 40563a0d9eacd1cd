"""Simulated seeds for the convergence guard's tests and benchmarks/rcp_power.py: steps to target drawn
log-normally around a centre (the spread of MLPerf's own 6.1 RCPs: coefficients of variation 1.5-10%, median
about 4.5%), then rounded up to the evaluation cadence (a run is seen to reach the target only at an evaluation),
times the global batch size."""

from __future__ import annotations

import numpy as np

BS = 32
CADENCE_STEPS = 25  # one evaluation every 25 steps: 2.5% of the 1,000-step centre
CENTRE_STEPS = 1000.0


def samples(rng: np.random.Generator, n: int, cv: float, scale: float = 1.0, cadence: int = CADENCE_STEPS,
            centre: float = CENTRE_STEPS) -> list[float]:
    steps = centre * scale * np.exp(rng.normal(0.0, cv, n))
    return [float(np.ceil(s / cadence) * cadence * BS) for s in steps]


def rates(rng: np.random.Generator, sets: int, cv: float, n_ref: int = 20, n_cand: int = 10,
          faster: float = 0.10) -> tuple[float, float]:
    """(false-alarm rate of A/A sets, share of `faster`-fewer-samples candidates flagged), each over `sets`
    reference/candidate sets decided by suite.compare.rcp_guard.check_samples (mlperf_logging's checker)."""
    from suite.compare.rcp_guard import FASTER, check_samples

    def flagged(ref: list[float], cand: list[float]) -> bool:
        raw = {"sim_ref": {"Benchmark": "sim", "BS": BS, "Hyperparams": {}, "Epochs to converge": ref}}
        out = check_samples(raw, "sim", BS, cand, "simulated")
        return not isinstance(out, str) and out.verdict == FASTER

    aa = sum(flagged(samples(rng, n_ref, cv), samples(rng, n_cand, cv)) for _ in range(sets))
    ab = sum(flagged(samples(rng, n_ref, cv), samples(rng, n_cand, cv, 1 - faster)) for _ in range(sets))
    return aa / sets, ab / sets

"""AlgoPerf performance profiles (Dolan & Moré 2002; Dahl et al. 2023, "Benchmarking Neural Network Training
Algorithms", section 4.5): scores that compare training algorithms across workloads by time to target.

For workload w and algorithm a with time to target t[a][w] (a miss is infinitely slow):
  r[a][w] = t[a][w] / min over a' of t[a'][w]          (inf where a missed, or where every algorithm missed)
  rho_a(tau) = share of workloads with r[a][w] <= tau   (a step function of tau, from 1 up)
  score_a = 1 / (tau_max - 1) * integral from 1 to tau_max of rho_a(tau) d tau, in [0, 1]
The integral is exact (rho is a step function), not a sum over a grid. AlgoPerf uses tau_max = 4.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

INF = math.inf
DEFAULT_TAU_MAX = 4.0

Times = Mapping[str, Mapping[str, float]]  # workload -> algorithm -> time to target (s), inf for a miss


def ratios(times: Times, algorithms: list[str]) -> dict[str, dict[str, float]]:
    """algorithm -> workload -> r = t / best t on that workload."""
    out: dict[str, dict[str, float]] = {a: {} for a in algorithms}
    for workload, per_algo in times.items():
        best = min((per_algo.get(a, INF) for a in algorithms), default=INF)
        for a in algorithms:
            t = per_algo.get(a, INF)
            out[a][workload] = t / best if math.isfinite(t) and math.isfinite(best) and best > 0 else (
                1.0 if t == best == 0 else INF)
    return out


def rho(r: Mapping[str, float], tau: float) -> float:
    """Share of workloads on which the algorithm is within a factor tau of the best."""
    return sum(1 for v in r.values() if v <= tau) / len(r) if r else 0.0


def integrated_score(r: Mapping[str, float], tau_max: float = DEFAULT_TAU_MAX) -> float:
    """(1 / (tau_max - 1)) * integral_1^tau_max rho(tau) d tau, computed exactly."""
    if tau_max <= 1:
        raise ValueError(f"tau_max must be > 1, got {tau_max}")
    if not r:
        return 0.0
    area = sum(tau_max - max(1.0, v) for v in r.values() if v <= tau_max)
    return area / (len(r) * (tau_max - 1))


def curve(r: Mapping[str, float], tau_max: float = DEFAULT_TAU_MAX) -> list[tuple[float, float]]:
    """Breakpoints (tau, rho(tau)) of the step function on [1, tau_max], ready to draw as steps."""
    points = [(1.0, rho(r, 1.0))]
    for v in sorted({v for v in r.values() if 1.0 < v <= tau_max}):
        points.append((v, rho(r, v)))
    points.append((tau_max, rho(r, tau_max)))
    return points

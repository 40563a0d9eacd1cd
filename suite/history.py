"""Change points in the nightly history: per series (workload x hardware x backend x precision x mode x metric,
ordered by run date), where did the level move, between which commits, by how much, and how surely.

The detector is `ruptures` (binary segmentation with the least-squares cost, on log values) behind ONE function,
`change_points`. ruptures gives locations, not significance, so each split is kept only if a permutation test
says so: the segment is shuffled many times and the best split of each shuffle is scored with the same cost
(ruptures' CostL2 gain, in closed form and vectorised over the shuffles: tests/test_history.py checks it equals
ruptures' own); the p-value is the share of shuffles that split at least as well as the real data. The test
includes the search over split positions (as E-Divisive's does), so picking the best split is no bias.
docs/compare.md ("History") says why this detector.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_ALPHA = 0.01
DEFAULT_PERMUTATIONS = 999
MIN_SEGMENT = 5  # points on each side of a change: fewer cannot tell a step from an outlier
METRICS = (  # (name, lower is better, getter on baselines.RunFigures)
    ("time_per_step_s", True),
    ("samples_per_s", False),
    ("time_to_target_s", True),
)


@dataclass
class Split:
    index: int  # first point of the new level
    p_value: float


def _best_split(x: np.ndarray, min_size: int) -> tuple[int, float]:
    """ruptures' best single split of x and its cost reduction (the gain the permutation test scores)."""
    import ruptures as rpt

    algo = rpt.Binseg(model="l2", min_size=min_size, jump=1).fit(x.reshape(-1, 1))
    k = algo.predict(n_bkps=1)[0]
    gain = algo.cost.error(0, len(x)) - algo.cost.error(0, k) - algo.cost.error(k, len(x))
    return k, float(gain)


def best_gains(rows: np.ndarray, min_size: int) -> np.ndarray:
    """The best least-squares split gain of each row: max over k of k(n-k)/n (mean left - mean right)^2, which is
    CostL2(0,n) - CostL2(0,k) - CostL2(k,n). Vectorised: 999 shuffles of 60 points in a millisecond."""
    n = rows.shape[1]
    k = np.arange(min_size, n - min_size + 1)
    csum = np.cumsum(rows, axis=1)
    left = csum[:, k - 1] / k
    right = (csum[:, -1:] - csum[:, k - 1]) / (n - k)
    return (k * (n - k) / n * (left - right) ** 2).max(axis=1)


def change_points(values: list[float] | np.ndarray, alpha: float = DEFAULT_ALPHA,
                  permutations: int = DEFAULT_PERMUTATIONS, min_size: int = MIN_SEGMENT, seed: int = 0) -> list[Split]:
    """Indices where the level of `values` changes, each significant at `alpha` by a permutation test.

    Binary segmentation: the best split of the whole series is tested; if significant, each side is searched
    again. Values are taken in log space, so a 5% step is the same size at any level."""
    x = np.log(np.asarray(values, dtype=float))
    rng = np.random.default_rng(seed)
    found: list[Split] = []
    stack = [(0, len(x))]
    while stack:
        a, b = stack.pop()
        if b - a < 2 * min_size:
            continue
        seg = x[a:b]
        if np.ptp(seg) == 0:
            continue
        k, gain = _best_split(seg, min_size)
        shuffles = rng.permuted(np.broadcast_to(seg, (permutations, len(seg))), axis=1)
        at_least = int((best_gains(shuffles, min_size) >= gain * (1 - 1e-9)).sum())
        p = (at_least + 1) / (permutations + 1)
        if p <= alpha:
            found.append(Split(a + k, p))
            stack += [(a, a + k), (a + k, b)]
    return sorted(found, key=lambda s: s.index)


# ---- the series in a results folder ---------------------------------------------------------------------------


@dataclass
class Point:
    started_at: str
    git_sha: str | None
    value: float  # the median over the runs of one commit (a night's seeds)
    runs: int


@dataclass
class ChangePoint:
    workload: str
    hardware: str
    backend: str
    precision: str
    mode: str
    metric: str
    index: int
    points: int
    before_sha: str | None  # the last commit at the old level
    after_sha: str | None  # the first commit at the new level: the change is in (before_sha, after_sha]
    before_at: str
    after_at: str
    before: float  # median level before
    after: float
    change: float  # after / before - 1
    worse: bool
    p_value: float

    @property
    def ident(self) -> str:
        """Stable across nightly runs: what a GitHub issue is keyed by."""
        return (f"{self.workload}|{self.hardware}|{self.backend}|{self.precision}|{self.mode}|{self.metric}|"
                f"{self.after_sha or self.after_at}")


def series(results: Path) -> tuple[dict[tuple[str, ...], list[Point]], list[str]]:
    """Every series in a results folder, one point per commit (runs of one commit: their median), by date."""
    from suite.baselines import load_paths

    loaded = load_paths([results])
    runs: dict[tuple[str, ...], dict[str, list[tuple[str, float]]]] = defaultdict(lambda: defaultdict(list))
    for rec in loaded.records:
        f = rec.figures
        mode = rec.mode
        for metric, _ in METRICS:
            v = getattr(f, metric, None)
            if metric == "time_to_target_s" and (mode != "tta" or not f.reached):
                continue
            if v is None or not math.isfinite(v) or v <= 0:
                continue
            key = (rec.key.workload, rec.key.hardware, rec.key.backend, str(rec.comparison.get("precision")),
                   mode, metric)
            commit = f.git_sha or f"run:{f.run_id}"
            runs[key][commit].append((f.started_at or "", float(v)))
    out: dict[tuple[str, ...], list[Point]] = {}
    for key, by_commit in runs.items():
        pts = [Point(min(t for t, _ in xs), None if c.startswith("run:") else c, float(np.median([v for _, v in xs])),
                     len(xs)) for c, xs in by_commit.items()]
        out[key] = sorted(pts, key=lambda p: p.started_at)
    return out, loaded.errors


def history(results: Path, alpha: float = DEFAULT_ALPHA, min_points: int = 2 * MIN_SEGMENT,
            permutations: int = DEFAULT_PERMUTATIONS) -> dict[str, Any]:
    """The change points of every series under `results`, as the JSON `trainbench history --json` prints."""
    all_series, errors = series(results)
    found: list[ChangePoint] = []
    lower_better = dict(METRICS)
    for key, pts in sorted(all_series.items()):
        if len(pts) < max(min_points, 2 * MIN_SEGMENT):
            continue
        values = [p.value for p in pts]
        for s in change_points(values, alpha, permutations):
            before = float(np.median(values[max(0, s.index - 10):s.index]))
            after = float(np.median(values[s.index:s.index + 10]))
            change = after / before - 1
            workload, hardware, backend, precision, mode, metric = key
            found.append(ChangePoint(
                workload, hardware, backend, precision, mode, metric, s.index, len(pts),
                pts[s.index - 1].git_sha, pts[s.index].git_sha, pts[s.index - 1].started_at, pts[s.index].started_at,
                before, after, change, (change > 0) == lower_better[metric], s.p_value))
    return {
        "kind": "trainbench-history", "schema_version": 1, "alpha": alpha, "permutations": permutations,
        "detector": "ruptures Binseg (l1 cost) + permutation test of the best split",
        "series": len(all_series),
        "change_points": [{**asdict(c), "id": c.ident} for c in found],
        "errors": errors,
    }


def to_markdown(report: dict[str, Any]) -> str:
    cps = report["change_points"]
    lines = ["### TrainBench history: change points", "",
             f"{len(cps)} change point(s) in {report['series']} series ({report['detector']}, "
             f"alpha {report['alpha']}).", ""]
    if cps:
        lines += ["| | workload | metric | hardware | backend | precision | change | commits | p |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for c in cps:
            icon = "🔴" if c["worse"] else "🟢"
            rng = f"`{(c['before_sha'] or '?')[:10]}`..`{(c['after_sha'] or '?')[:10]}`"
            lines.append(f"| {icon} | `{c['workload']}` | {c['metric']} | {c['hardware']} | {c['backend']} | "
                         f"{c['precision']} | {c['change']:+.1%} | {rng} | {c['p_value']:.3g} |")
    if report["errors"]:
        lines += ["", f"{len(report['errors'])} bad file(s) skipped."]
    return "\n".join(lines)

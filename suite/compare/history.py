"""Change points in the nightly history: per series (workload x hardware x backend x precision x mode x metric,
ordered by run date), where did the level move, between which commits, by how much, and how surely.

The detector is ruptures' binary segmentation with the least-squares cost, on log values, behind ONE function,
`change_points`: each segment's best single split comes from ruptures' `KernelCPD` with the linear kernel (the
least-squares cost, solved in ruptures' C code; for one split it is exactly the split `Binseg(model="l2")` finds,
~50x faster: tests/compare/test_history.py checks both). ruptures gives locations, not significance, so each split is kept only if a permutation
test says so: the segment is shuffled many times and the best split of each shuffle is scored with the same cost
(ruptures' CostL2 gain, in closed form and vectorised over the shuffles: tests/compare/test_history.py checks it equals
ruptures' own); the p-value is the share of shuffles that split at least as well as the real data. The test
includes the search over split positions (as E-Divisive's does), so picking the best split is no bias.
docs/compare.md ("History") says why this detector.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_ALPHA = 0.01
DEFAULT_PERMUTATIONS = 999
MIN_SEGMENT = 5  # points on each side of a change: fewer cannot tell a step from an outlier
METRICS = (  # (name, lower is better, getter on stats.RunFigures)
    ("time_per_step_s", True),
    ("samples_per_s", False),
    ("time_to_target_s", True),
)


@dataclass
class Split:
    index: int  # first point of the new level
    p_value: float


def _best_split(x: np.ndarray, min_size: int) -> tuple[int, float]:
    """ruptures' best single split of x (KernelCPD, linear kernel: the least-squares cost, in ruptures' C code) and
    its cost reduction, the gain the permutation test scores (`_split_gains`' formula at that split)."""
    import ruptures as rpt

    k = int(rpt.KernelCPD(kernel="linear", min_size=min_size, jump=1).fit(x.reshape(-1, 1)).predict(n_bkps=1)[0])
    gains = _split_gains(x - x.mean(), min_size)
    return k, float(gains[k - min_size])


def _split_gains(centred: np.ndarray, min_size: int) -> np.ndarray:
    """The least-squares gain of every admissible split k of each row of `centred` (rows whose sum is 0):
    k(n-k)/n (mean left - mean right)^2 = n S_k^2 / (k(n-k)) with S_k the sum of the first k values."""
    n = centred.shape[-1]
    k = np.arange(min_size, n - min_size + 1)
    csum = np.cumsum(centred, axis=-1)[..., min_size - 1:n - min_size]
    csum *= csum
    csum *= n / (k * (n - k))
    return csum


def best_gains(centred_rows: np.ndarray, min_size: int) -> np.ndarray:
    """The best least-squares split gain of each row (rows centred: each sums to 0, as shuffles of a centred
    segment do): max over k of k(n-k)/n (mean left - mean right)^2, which is CostL2(0,n) - CostL2(0,k) -
    CostL2(k,n). Vectorised: 999 shuffles of 60 points in a millisecond."""
    return _split_gains(centred_rows, min_size).max(axis=1)


SegmentCache = dict[str, Any]  # segment key -> [split (relative to the segment), p-value] of its test


def _segment_key(raw: np.ndarray, alpha: float, permutations: int, min_size: int, seed: int) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{alpha!r}|{permutations}|{min_size}|{seed}|".encode())
    h.update(np.ascontiguousarray(raw, dtype="<f8").tobytes())
    return h.digest()


BATCH = 111  # shuffles drawn at a time: 999 = 9 x 111


def _test_segment(seg: np.ndarray, key: bytes, alpha: float, permutations: int, min_size: int) -> tuple[int, float]:
    """The best split of one segment (log values) and its permutation p-value. The shuffles come from a
    generator seeded by the segment's own values, so the answer is a function of the segment alone: a series
    that gains a point at its end re-tests only the segments that contain the new point. Shuffles are drawn
    in batches; once more than alpha of them split at least as well the split cannot be significant, and the
    p-value returned is then the lower bound so far (> alpha, which is all a caller reads of it)."""
    centred = seg - seg.mean()
    k, gain = _best_split(seg, min_size)
    rng = np.random.default_rng(list(np.frombuffer(key, dtype="<u4")))
    at_least, done = 0, 0
    while done < permutations:
        m = min(BATCH, permutations - done)
        shuffles = rng.permuted(np.broadcast_to(centred, (m, len(seg))), axis=1)
        at_least += int((best_gains(shuffles, min_size) >= gain * (1 - 1e-9)).sum())
        done += m
        if (at_least + 1) / (permutations + 1) > alpha:
            break
    return k, (at_least + 1) / (permutations + 1)


def change_points(values: list[float] | np.ndarray, alpha: float = DEFAULT_ALPHA,
                  permutations: int = DEFAULT_PERMUTATIONS, min_size: int = MIN_SEGMENT, seed: int = 0,
                  cache: SegmentCache | None = None, used: SegmentCache | None = None) -> list[Split]:
    """Indices where the level of `values` changes, each significant at `alpha` by a permutation test.

    Binary segmentation: the best split of the whole series is tested; if significant, each side is searched
    again. Values are taken in log space, so a 5% step is the same size at any level. Each segment's test is
    a pure function of the segment's values (and the arguments), so `cache` (segment key -> its split and
    p-value; the site keeps one between builds) gives exactly what computing them again would; `used` receives
    every segment test made or reused."""
    raw = np.asarray(values, dtype=float)
    x = np.log(raw)
    found: list[Split] = []
    stack = [(0, len(x))]
    while stack:
        a, b = stack.pop()
        if b - a < 2 * min_size:
            continue
        seg = x[a:b]
        if np.ptp(seg) == 0:
            continue
        key = _segment_key(raw[a:b], alpha, permutations, min_size, seed)
        hit = cache.get(key.hex()) if cache is not None else None
        if isinstance(hit, list) and len(hit) == 2 and isinstance(hit[0], int) and isinstance(hit[1], float) \
                and min_size <= hit[0] <= b - a - min_size:
            k, p = hit
        else:  # not cached, or an entry that is not what this function writes: computed again
            k, p = _test_segment(seg, key, alpha, permutations, min_size)
        if used is not None:
            used[key.hex()] = [k, p]
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
    from suite.results.baselines import load_paths

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

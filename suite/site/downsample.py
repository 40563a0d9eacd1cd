"""Long series thinned for a page: the first and last points, where the target is first reached, and each
stretch's lowest and highest value. A result of 360,000 evaluations made a 187 MB run page; its JSON copy on
the site still holds every point."""

from __future__ import annotations

import math
from collections.abc import Sequence

MAX_CHART_POINTS = 2000  # per series of a run page's chart
MAX_CURVE_POINTS = 1000  # per curve of a workload's convergence chart (up to MAX_CURVES curves)
MAX_TABLE_ROWS = 1000  # rows of a run page's evaluations table


def keep_indices(values: Sequence[float], max_points: int, target: float | None = None,
                 mode: str | None = None) -> list[int]:
    """The indices of `values` a page shows, in order: all of them up to `max_points`, else at most
    `max_points`: first, last, the first point that meets the target (and the one before it, so the crossing
    is drawn where it happened) and, in equal stretches of the rest, each stretch's minimum and maximum
    (non-finite values count as extremes, so a divergence stays visible)."""
    n = len(values)
    if n <= max_points:
        return list(range(n))
    keep = {0, n - 1}
    if target is not None and mode in ("max", "min"):
        for i, v in enumerate(values):
            if v >= target if mode == "max" else v <= target:
                keep |= {max(0, i - 1), i}
                break
    inner = n - 2
    buckets = max(1, (max_points - len(keep)) // 2)
    for b in range(buckets):
        lo, hi = 1 + b * inner // buckets, 1 + (b + 1) * inner // buckets
        if lo >= hi:
            continue
        span = range(lo, hi)
        keep.add(min(span, key=lambda i: values[i] if not math.isnan(values[i]) else -math.inf))
        keep.add(max(span, key=lambda i: values[i] if not math.isnan(values[i]) else math.inf))
    return sorted(keep)

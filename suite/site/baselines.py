"""The site's blessed baselines: each baseline file (read by suite.results.baselines' typed reader) with its
aggregate recomputed from the stored seeds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from suite.results import baseline_schema
from suite.results import baselines as bl
from suite.results.record import ResultError
from suite.results.stats import Aggregate


@dataclass
class Baseline:
    """A blessed baseline on the site: the file (read by suite.results.baselines' typed reader) and its aggregate,
    recomputed from the stored seeds by suite.results.stats, so it is the figure a leaderboard row of the same runs shows."""

    path: str  # relative to the baselines folder
    baseline: baseline_schema.Baseline
    agg: Aggregate

    @property
    def workload(self) -> str:
        return self.baseline.workload

    @property
    def hardware(self) -> str:
        return self.baseline.hardware

    @property
    def backend(self) -> str:
        return self.baseline.backend

    @property
    def spec_hash(self) -> str:
        return self.baseline.spec_hash

    @property
    def tta_s(self) -> float:
        return self.agg.tta_olympic_s


def load_baselines(root: Path | None) -> tuple[list[Baseline], list[str]]:
    """baselines/<hardware>/<domain>/<workload>/<backend>.json through suite.results.baselines' typed reader;
    a file that is not a valid baseline is named in the errors and skipped."""
    if root is None or not root.exists():
        return [], []
    try:
        found, errors = bl.load_baselines(root)
    except ResultError as e:
        return [], [str(e)]
    base = root if root.is_dir() else root.parent
    return [Baseline(p.relative_to(base).as_posix(), b, b.figures()) for p, b in found], errors

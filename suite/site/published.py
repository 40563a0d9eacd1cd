"""Published (imported) MLPerf systems on the leaderboards: reference rows beside the local submissions.

A submission whose runs carry `imported` provenance is a reference: shown with its badge (round, division,
availability), ranked by MLPerf's own score (result_summarizer's), one row per published system, in every local
board of its workload (a local runner and a published system on one table), or a board of its own when the
workload has no local run (a benchmark TrainBench does not run).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from suite.results.imported import ImportedFrom


def imported_of(column: str | None) -> ImportedFrom | None:
    """The index's `imported` column through the results' typed model (the site parses no JSON itself)."""
    return ImportedFrom.model_validate_json(column) if column else None


class Reference:
    """What a Submission (suite/site/data.py) shows when its runs are a published system's."""

    runs: list[Any]

    @property
    def reference(self) -> ImportedFrom | None:
        """The provenance of a published (imported) MLPerf submission, shown as a reference row; None for local."""
        return self.runs[0].imported

    @property
    def round(self) -> str:
        return f"MLPerf v{self.reference.round}" if self.reference else "local"

    @property
    def badge(self) -> str:
        ref = self.reference
        return f"MLPerf v{ref.round} · {ref.division} · {ref.availability}" if ref else ""

    @property
    def mlperf_score_s(self) -> float | None:
        """MLPerf's own score (result_summarizer's olympic mean with RCP scaling) in seconds; inf when dropped."""
        ref = self.reference
        if not ref:
            return None
        return math.inf if ref.score_min is None else float(ref.score_min) * 60.0

    @property
    def reference_series(self) -> str:
        ref = self.reference
        return f"{ref.submitter} {ref.system_name} · MLPerf v{ref.round}" if ref else ""


def with_references(boards: list[tuple[str, list[Any]]], featured: list[Any],
                    ranked: Callable[[list[Any]], list[Any]]) -> list[tuple[str, list[Any]]]:
    """`boards` with the newest submission of each published system added to each (ranked by `ranked`)."""
    refs: dict[tuple[str, str], Any] = {}
    for s in featured:
        if s.reference:
            key = (s.reference.submitter, s.reference.system)
            if key not in refs or s.timestamp > refs[key].timestamp:
                refs[key] = s
    if not refs:
        return boards
    published = list(refs.values())
    if not boards:
        return [("published", ranked(published))]
    return [(h, ranked(subs + published)) for h, subs in boards]


def published_key(imported: ImportedFrom | None) -> tuple[str, ...]:
    """What splits published systems that share hardware, backend and precision into submissions of their own."""
    return ("published", imported.submitter, imported.system) if imported else ()


def newest_target(latest: Any, featured: list[Any]) -> dict[str, Any]:
    """The workload's target: its newest run's, else (a newest run without one) the newest run's that has one."""
    if latest is not None and latest.target:
        return latest.target
    found = [s.latest for s in featured if s.latest.target]
    return max(found, key=lambda r: r.started_at).target if found else {}

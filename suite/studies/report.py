"""The study report (study.json) as a typed object, and its reader: what `trainbench study` wrote, read back.

suite/studies/runner.py writes the file; the site (and anything else) reads it only through `read_study`, which
imports nothing of the study runner. A missed target is written as null and read back as infinity.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_STUDY_BYTES = 64 * 1024 * 1024


class StudyReportError(ValueError):
    """Not a study report; the message names the file and what is wrong."""


@dataclass(frozen=True)
class ScoreRow:
    algorithm: str
    score: float  # the integrated performance-profile score in [0, 1]
    workloads_reached: int
    workloads: int


@dataclass(frozen=True)
class StudyReport:
    name: str
    tau_max: float
    algorithms: list[str]
    times_s: dict[str, dict[str, float]]  # workload -> algorithm -> olympic mean time to target (inf: missed)
    ratios: dict[str, dict[str, float]]  # algorithm -> workload -> time / best time (inf: missed)
    profiles: dict[str, list[tuple[float, float]]]  # algorithm -> step points (tau, share of workloads)
    scores: list[ScoreRow]  # best first


def _seconds(v: Any) -> float:
    """The JSON writes a missed target (infinitely slow) as null."""
    if v is None:
        return math.inf
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise TypeError(f"{v!r} is not a number")
    return float(v)


def report_from_json(data: Any, source: str) -> StudyReport:
    """The typed report of a parsed study.json; StudyReportError names the source and the problem."""
    try:
        tau_max = float(data["tau_max"])
        if not (math.isfinite(tau_max) and tau_max > 1):  # the profile plot divides by tau_max - 1
            raise ValueError(f"tau_max must be a finite number above 1, got {data['tau_max']!r}")
        algorithms = [str(a) for a in data["algorithms"]]
        times = {str(w): {a: _seconds(per.get(a)) for a in algorithms} for w, per in data["times_s"].items()}
        return StudyReport(
            name=str(data["study"]["name"]),
            tau_max=tau_max,
            algorithms=algorithms,
            times_s=times,
            ratios={a: {w: _seconds(data["ratios"][a].get(w)) for w in times} for a in algorithms},
            profiles={a: [(float(t), float(f)) for t, f in data["profiles"][a]] for a in algorithms},
            scores=[ScoreRow(str(r["algorithm"]), float(r["score"]), int(r["workloads_reached"]), int(r["workloads"]))
                    for r in data["scores"]],
        )
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
        raise StudyReportError(f"{source}: not a study report ({type(e).__name__}: {e})") from None


def read_study(path: Path) -> StudyReport:
    """study.json, or the folder `trainbench study` wrote it to."""
    file = path / "study.json" if path.is_dir() else path
    try:
        size = file.stat().st_size
        if size > MAX_STUDY_BYTES:
            raise StudyReportError(f"{file}: {size} bytes is too large for a study report")
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StudyReportError(f"{file}: not a study report (cannot read as JSON: {e})") from None
    except RecursionError:
        raise StudyReportError(f"{file}: not a study report (nested too deeply)") from None
    return report_from_json(data, str(file))

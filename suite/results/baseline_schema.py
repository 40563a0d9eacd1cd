"""The baseline file: its schema (`Baseline`) and its typed reader.

A baseline file `baselines/<hardware>/<domain>/<workload>/<backend>.json` holds, for one spec hash on one
hardware, the aggregate over N seeds (suite.results.stats.aggregate, stored with infinities as null) AND every
seed's raw figures (the test in compare needs the runs, not only their mean), plus where they came from.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from suite.results import stats
from suite.results.record import MAX_RESULT_BYTES, ResultError
from suite.results.stats import RunFigures

BASELINE_SCHEMA_VERSION = 1
BASELINE_KIND: Final = "trainbench-baseline"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Provenance(_Model):
    run_ids: list[str]
    result_files: list[str]
    result_git_shas: list[str] = Field(description="git shas the runs were made at")
    result_git_dirty: bool = Field(description="true if any run was made from a dirty tree")
    first_run_at: str | None = None
    last_run_at: str | None = None
    promoted_at: str
    promoted_by_git_sha: str | None = Field(default=None, description="trainbench checkout that promoted")


class BaselineAggregate(_Model):
    runs: int
    reached: int
    success_rate: float
    tta_olympic_s: float | None = Field(description="None = infinite (too many runs did not reach the target)")
    tta_median_s: float | None
    tta_min_s: float | None
    tta_max_s: float | None
    steps_to_target_median: float | None
    time_per_step_median_s: float | None
    samples_per_s_median: float | None
    mfu_median: float | None
    peak_memory_median_bytes: float | None
    energy_median_j: float | None

    @classmethod
    def of(cls, agg: stats.Aggregate) -> BaselineAggregate:
        """The stored form of suite.results.stats.aggregate: JSON has no infinity, so inf (and NaN) become null."""
        def f(x: float | None) -> float | None:
            return None if x is None or math.isinf(x) or math.isnan(x) else x

        return cls(
            runs=agg.runs, reached=agg.reached, success_rate=agg.success_rate, tta_olympic_s=f(agg.tta_olympic_s),
            tta_median_s=f(agg.tta_median_s), tta_min_s=f(agg.tta_min_s), tta_max_s=f(agg.tta_max_s),
            steps_to_target_median=f(agg.steps_to_target_median), time_per_step_median_s=f(agg.time_per_step_median_s),
            samples_per_s_median=f(agg.samples_per_s_median), mfu_median=f(agg.mfu_median),
            peak_memory_median_bytes=f(agg.peak_memory_median_bytes), energy_median_j=f(agg.energy_median_j),
        )


class Baseline(_Model):
    schema_version: int = BASELINE_SCHEMA_VERSION
    kind: Literal["trainbench-baseline"] = BASELINE_KIND
    hardware: str
    workload: str
    workload_version: int
    backend: str
    spec_hash: str
    noise_floor: float | None = Field(description="the spec's compare.noise_floor (None: compare's default)")
    comparison_key: dict[str, Any] | None = Field(default=None, description="suite/results/key.py: precision, ...")
    aggregate: BaselineAggregate
    runs: list[RunFigures] = Field(min_length=1)
    provenance: Provenance

    def figures(self) -> stats.Aggregate:
        """The aggregate recomputed from the stored runs (the one aggregation, with infinities kept)."""
        return stats.aggregate(self.runs)


def parse_baseline(data: dict[str, Any], source: str) -> Baseline:
    version = data.get("schema_version")
    if version != BASELINE_SCHEMA_VERSION:
        raise ResultError(
            f"{source}: baseline schema_version {version!r}; this trainbench reads {BASELINE_SCHEMA_VERSION} "
            "(re-promote the baseline from its results)"
        )
    try:
        return Baseline.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()[:5])
        raise ResultError(f"{source}: {problems}") from None


def read_baseline(path: Path) -> Baseline:
    """The typed reader of one baseline file; ResultError names the file and what is wrong."""
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_RESULT_BYTES + 1)
    except OSError as e:
        raise ResultError(f"{path}: cannot read: {e}") from None
    if len(text) > MAX_RESULT_BYTES:
        raise ResultError(f"{path}: larger than any real baseline ({MAX_RESULT_BYTES} bytes)")
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultError(f"{path}: not valid JSON (truncated or corrupt?): {e}") from None
    except RecursionError:
        raise ResultError(f"{path}: not a baseline: nested too deeply") from None
    if not isinstance(data, dict):
        raise ResultError(f"{path}: a baseline file must be a JSON object")
    if data.get("kind") != BASELINE_KIND:
        raise ResultError(f"{path}: not a baseline file (kind {data.get('kind')!r}, expected {BASELINE_KIND!r})")
    return parse_baseline(data, str(path))

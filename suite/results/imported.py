"""The provenance of an imported result: a published MLPerf log brought in by `trainbench results import-mlperf`
(suite/mlperf/importer.py). An optional part of Result (`Result.imported`, default None)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")  # as suite.results.record's models


class ImportedFrom(_Model):
    """Where an imported result came from (a published MLPerf log): never a local run's seed, never blessed unless
    asked for by name. Optional on Result (default None); the lead folds it into schema version 3."""

    source: Literal["mlperf"] = "mlperf"
    round: str = Field(description="MLPerf round, e.g. 5.1")
    ruleset: str = Field(description="the checker's ruleset that read the log, e.g. 5.1.0")
    division: str
    availability: str = Field(description="the system description's status, e.g. Available on-premise")
    submitter: str
    system: str = Field(description="the system's folder name (systems/<system>.json)")
    system_name: str
    benchmark: str = Field(description="MLPerf's benchmark name (the folder under results/<system>/)")
    framework: str
    log_path: str
    log_sha256: str
    result_index: int = Field(description="N of result_N.txt")
    run_stop_status: str | None = None
    compliant: bool
    compliance_reason: str | None = None
    global_batch_size: float | None = None
    score_min: float | None = Field(default=None, description="MLPerf's score of this system x benchmark in minutes "
                                    "(result_summarizer's); None: infinite, too many runs dropped")
    score_runs: int = 0
    score_dropped: int = 0
    rcp_scaling_factor: float = 1.0

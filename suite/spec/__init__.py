"""Workload specs: `schema` (the pydantic models of `workloads/<domain>/<name>.yaml`, SpecError, the spec hash),
`safe_yaml` (the safe YAML reader), `overrides` (variants and `--set`, validation that blames the flag).

Every error names the file, the field path and the problem, e.g.
`workloads/cv/digits_cnn.yaml: target.value: Input should be greater than 0`.
The package is pure: it imports no other suite module (no registry, no user code; tests/project/test_import_graph.py).
This module is its public API: callers import from `suite.spec`, never from the modules inside.

May import: no other suite module.
"""

from __future__ import annotations

from suite.spec.overrides import (
    apply_overrides,
    blame_overrides,
    format_validation,
    json_schema,
    merge_spec_data,
    parse_override,
    parse_spec,
)
from suite.spec.safe_yaml import parse_yaml, read_spec_file
from suite.spec.schema import (
    DEFAULT_MAX_INIT_S,
    MAX_BUDGET_S,
    MAX_SPEC_BYTES,
    MAX_SPEC_VALUES,
    MLPERF_BENCHMARKS,
    MLPERF_INIT_LIMIT_S,
    PRECISIONS,
    TIERS,
    Budget,
    CheckpointSpec,
    CompareSpec,
    CompressionSpec,
    DataSpec,
    Domain,
    EvalSpec,
    FaultSpec,
    LossSpec,
    MlperfBenchmark,
    ModelSpec,
    OptimizerSpec,
    ParallelSpec,
    Precision,
    ScheduleSpec,
    SpecError,
    Target,
    ThroughputSpec,
    Tier,
    WorkloadSpec,
)

__all__ = [
    "DEFAULT_MAX_INIT_S", "MAX_BUDGET_S", "MAX_SPEC_BYTES", "MAX_SPEC_VALUES", "MLPERF_BENCHMARKS",
    "MLPERF_INIT_LIMIT_S", "PRECISIONS", "TIERS", "Budget", "CheckpointSpec", "CompareSpec", "CompressionSpec",
    "DataSpec", "Domain", "EvalSpec", "FaultSpec", "LossSpec", "MlperfBenchmark", "ModelSpec", "OptimizerSpec",
    "ParallelSpec", "Precision", "ScheduleSpec", "SpecError", "Target", "ThroughputSpec", "Tier", "WorkloadSpec",
    "apply_overrides", "blame_overrides", "format_validation", "json_schema", "merge_spec_data", "parse_override",
    "parse_spec", "parse_yaml", "read_spec_file",
]

"""The lean (msgspec) mirror of suite.results.record.Result: compare and promote decode a current result file with it.

It declares EVERY field of Result, each at least as strict as the pydantic schema (unknown fields forbidden
where Result forbids them, no default where Result has none, 64-bit integers, no string-to-number coercion).
So a file it accepts is one the full schema accepts; a file it refuses goes to the full schema
(suite/results/runfiles.py), which decides, so `results validate`, compare, promote, the site and the index give one
verdict per file (issue 17 item 6). tests/results/test_one_verdict.py holds the mirror to the schema, field by field.

Why a mirror and not pydantic: msgspec type-checks a ~15 KB file in ~50 us and skips `config` unbuilt;
pydantic's full validation took ~6x as long on the same file (docs/compare.md, Speed).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from pydantic import TypeAdapter

from suite.results.record import Status, check_started_at

# larger integers (which pydantic and json still read) are left to the full schema to judge
Int = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


# A mirror of a pydantic model with extra="forbid" says `forbid_unknown_fields=True`; a part of a free-form
# dict of Result (`config`) does not: there the keys compare reads are typed and the rest skipped.


class LeanCompare(msgspec.Struct, frozen=True):
    noise_floor: float | None = None


class LeanSpec(msgspec.Struct, frozen=True):
    compare: LeanCompare = LeanCompare()
    backends: dict[str, Any] = {}
    throughput: dict[str, Any] = {}


class LeanConfig(msgspec.Struct, frozen=True):
    spec: LeanSpec = LeanSpec()
    precision: str = "fp32"
    compile: bool = False
    mode: str = "tta"


class LeanEvalPoint(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    step: Int
    samples: Int
    elapsed_s: float
    train_s: float
    metrics: dict[str, float]


class LeanPeak(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    device: str
    dtype: str
    flops_per_s: float | None
    source: str
    provenance: str | None = None
    measured_flops_per_s: float | None = None
    measured_gemm_n: Int | None = None
    measured_dtype: str | None = None
    overridden: bool = False
    rule: str | None = None
    by_class: dict[str, dict[str, Any]] = {}


class LeanHardware(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    slug: str
    device_type: str
    device_name: str
    device_count: Int
    cpu_model: str
    cpu_cores: Int
    memory_bytes: Int | None = None
    hostname: str | None = None
    node_count: Int = 1
    devices: list[dict[str, Any]] = []
    interconnect: str | None = None
    load_avg_start: list[float] | None = None
    load_avg_end: list[float] | None = None
    load_avg_max: list[float] | None = None
    cpu_wait_s: float | None = None
    container_image: str | None = None
    comm_env: dict[str, str] = {}


class LeanGit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    sha: str | None = None
    dirty: bool | None = None
    branch: str | None = None


class LeanImported(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    round: str
    ruleset: str
    division: str
    availability: str
    submitter: str
    system: str
    system_name: str
    benchmark: str
    framework: str
    log_path: str
    log_sha256: str
    result_index: Int
    compliant: bool
    source: Literal["mlperf"] = "mlperf"
    run_stop_status: str | None = None
    compliance_reason: str | None = None
    global_batch_size: float | None = None
    score_min: float | None = None
    score_runs: Int = 0
    score_dropped: Int = 0
    rcp_scaling_factor: float = 1.0


class LeanGoodput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    wall_s: float
    parts_s: dict[str, float]
    unaccounted_s: float
    goodput: float | None
    settled_step_s: float | None = None
    compile_steps: Int = 0
    startup_from: str = ""
    checkpoint: dict[str, Any] = {}
    recovery: dict[str, Any] = {}
    ranks: list[dict[str, Any]] = []


class LeanResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Every field of suite.results.record.Result; `config` is read only as far as compare needs it."""

    schema_version: Int
    run_id: str
    started_at: str  # parsed by pydantic's own datetime parser (started_at_iso), so it reads as Result reads it
    workload: str
    workload_version: Int
    spec_hash: str
    backend: str
    config: LeanConfig
    status: Status
    train_s: float
    eval_s: float
    init_s: float
    total_s: float
    steps: Int
    samples: Int
    hardware: LeanHardware
    seed: Int
    backend_version: str | None = None
    tier: str | None = None
    parallel: dict[str, Any] = {}
    mode: Literal["tta", "throughput"] = "tta"
    step_times_s: list[float] = []
    time_to_target_s: float | None = None
    steps_to_target: Int | None = None
    samples_to_target: Int | None = None
    final_metrics: dict[str, float] = {}
    throughput: dict[str, float] = {}
    step_time_s: dict[str, float] = {}
    flops_per_sample: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    mfu_measured_peak: float | None = None
    peak: LeanPeak | None = None
    flops_by_class: dict[str, float] = {}
    attention_flops: str | None = None
    mfu_by_attention: dict[str, float | None] = {}
    clock: dict[str, Any] = {}
    memory: dict[str, Any] = {}
    energy_j: float | None = None
    energy_to_target_j: float | None = None
    eval_curve: list[LeanEvalPoint] = []
    software: dict[str, str | None] = {}
    git: LeanGit = LeanGit()
    world_size: Int = 1
    error: str | None = None
    warnings: list[str] = []
    synthetic_data: bool = False
    mllog: str | None = None
    phases: dict[str, Any] = {}
    imported: LeanImported | None = None
    goodput: LeanGoodput | None = None


DECODER = msgspec.json.Decoder(LeanResult)
_DATETIME = TypeAdapter(datetime)


def started_at_iso(value: str) -> str:
    """`started_at` parsed and checked exactly as Result's field is (pydantic's parser, the plausible-start
    rule), spelled as figures_of spells it; ValueError (pydantic's ValidationError is one) when Result would
    refuse it."""
    return check_started_at(_DATETIME.validate_python(value)).isoformat()

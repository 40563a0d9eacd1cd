"""The Result schema (one JSON file per run), its atomic append-only writer, reader, validator and migrations.

Layout: `results/<hardware>/<workload>/<backend>/<utc-stamp>-<run-id>.json`. A file is written once, to a
temporary name in the same folder, fsynced, then linked into place: a reader never sees half a file, a kill
mid-write leaves no partial result, and an existing file is never replaced.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from suite.results.account import Goodput
from suite.results.imported import ImportedFrom
from suite.results.tree import clean_stale_temporaries, create_temp, json_files, leads_out

SCHEMA_VERSION = 3  # 2: throughput mode (status `measured`, `mode`, `step_times_s`); 3: `goodput` (issue 48), and the
# optional `imported` (a published MLPerf result, issue 44), `synthetic_data` and hardware's load_avg_max, cpu_wait_s (issue 49)
Status = Literal["reached", "budget", "diverged", "error", "interrupted", "measured"]
STATUSES: tuple[str, ...] = ("reached", "budget", "diverged", "error", "interrupted", "measured")
Mode = Literal["tta", "throughput"]
MAX_RESULT_BYTES = 64 * 1024 * 1024
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")  # a JSON escape of half a UTF-16 pair


class _Model(BaseModel):
    # NaN/inf (a diverged run's eval loss) as "NaN"/"Infinity" strings, which read back as floats: the default
    # writes null, which the reader then rejects, and a written result would be unreadable
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class EvalPoint(_Model):
    step: int
    samples: int
    elapsed_s: float = Field(description="seconds since run_start (the TTA clock) when this eval finished")
    train_s: float = Field(description="train-only seconds at this point (AlgoPerf's clock)")
    metrics: dict[str, float]


class PeakInfo(_Model):
    device: str
    dtype: str
    flops_per_s: float | None = Field(description="dense peak per device (table, ISA or --peak-tflops); "
                                      "null for a device not in the table")
    source: str
    provenance: str | None = Field(default=None, description="vendor | reported | computed | override")
    measured_flops_per_s: float | None = Field(default=None, description="best GEMM FLOP/s at run start")
    measured_gemm_n: int | None = None
    measured_dtype: str | None = Field(default=None, description="the dtype the GEMM benchmark ran in")
    overridden: bool = False
    rule: str | None = Field(default=None, description="how per-class peaks combine: flop_share_weighted | "
                             "fastest_allowed | override (suite/measure/op_dtypes.py)")
    by_class: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per op class (matmul, convolution, attention): dtype, flops_per_s, "
        "share of model FLOPs, why that dtype, source")


class HardwareInfo(_Model):
    slug: str = Field(description="folder name under results/, e.g. cpu-amd-epyc-7b13-x2 or nvidia-h200-x8")
    device_type: str
    device_name: str
    device_count: int
    cpu_model: str
    cpu_cores: int
    memory_bytes: int | None = None
    hostname: str | None = None
    node_count: int = 1
    devices: list[dict[str, Any]] = Field(
        default_factory=list, description="per device: name, clocks (SM, memory; MHz), power limit (W), ECC, MIG")
    interconnect: str | None = Field(default=None, description="topology summary (NVLink links, nvidia-smi topo)")
    load_avg_start: list[float] | None = Field(default=None, description="host 1/5/15-min load at run start")
    load_avg_end: list[float] | None = Field(default=None, description="host 1/5/15-min load at run end")
    load_avg_max: list[float] | None = Field(default=None, description="host 1/5/15-min load with the highest 1-min "
                                             "figure sampled while the clock ran (suite/measure/host_share.py)")
    cpu_wait_s: float | None = Field(default=None, description="seconds the run's main thread waited for a CPU while "
                                     "the clock ran (Linux schedstat): what a busy host took from it")
    container_image: str | None = Field(default=None, description="from TRAINBENCH_CONTAINER_IMAGE when exported")
    comm_env: dict[str, str] = Field(default_factory=dict, description="NCCL_* and HCCL_* environment")


class GitInfo(_Model):
    sha: str | None = None
    dirty: bool | None = None
    branch: str | None = None


class Result(_Model):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    started_at: datetime
    workload: str
    workload_version: int
    spec_hash: str
    backend: str
    backend_version: str | None = None
    tier: str | None = None
    config: dict[str, Any] = Field(description="the resolved spec and run configuration")
    parallel: dict[str, Any] = Field(default_factory=dict, description="dp, tp, pp, zero_stage, offload")
    status: Status
    mode: Mode = Field(default="tta", description="tta: to the target on the clock; throughput: timed steps only")
    step_times_s: list[float] = Field(default_factory=list, description="throughput mode: every measured step's "
                                      "seconds (device events on accelerators, else perf_counter after a sync)")
    time_to_target_s: float | None = None
    train_s: float
    eval_s: float
    init_s: float
    total_s: float
    steps: int
    samples: int
    steps_to_target: int | None = None
    samples_to_target: int | None = None
    final_metrics: dict[str, float] = Field(default_factory=dict)
    throughput: dict[str, float] = Field(default_factory=dict)
    step_time_s: dict[str, float] = Field(default_factory=dict, description="p50/p90/p99/mean of one step")
    flops_per_sample: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    mfu_measured_peak: float | None = Field(default=None, description="MFU against the measured GEMM peak")
    peak: PeakInfo | None = None
    flops_by_class: dict[str, float] = Field(default_factory=dict, description="flops_per_sample by op class")
    attention_flops: str | None = Field(default=None, description="attention FLOPs convention: full | causal")
    mfu_by_attention: dict[str, float | None] = Field(
        default_factory=dict, description="MFU under each attention convention (the other figure beside)")
    clock: dict[str, Any] = Field(
        default_factory=dict, description="MLPerf clock rules: data staging (seconds, on the clock or declared), "
        "cache_clear, the init limit and whether init stayed within it")
    memory: dict[str, Any] = Field(default_factory=dict)
    energy_j: float | None = None
    energy_to_target_j: float | None = None
    eval_curve: list[EvalPoint] = Field(default_factory=list)
    hardware: HardwareInfo
    software: dict[str, str | None] = Field(
        default_factory=dict, description="versions; accelerator stack keys (driver, cuda_runtime, cudnn, nccl, "
        "triton, transformer_engine, cann, torch_npu) are always present, null when absent")
    git: GitInfo = GitInfo()
    seed: int
    world_size: int = 1
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)
    synthetic_data: bool = Field(default=False, description="the run read files `trainbench data prepare --synthetic` "
                                 "wrote (suite/data/synthetic/files.py): its figures mean nothing of the real task")
    mllog: str | None = Field(default=None, description="file name of the :::MLLOG log beside this result")
    phases: dict[str, Any] = Field(
        default_factory=dict, description="RL post-training (task grpo): seconds per phase (weight_sync, gen, "
        "reward, old_log_prob, ref, update), tokens generated/trained per second, MFU of generation and update")
    imported: ImportedFrom | None = Field(default=None, description="set on a published MLPerf result brought "
                                          "in by `results import-mlperf`: its provenance (optional, schema v3)")
    goodput: Goodput | None = Field(default=None, description="the wall-clock account (schema 3); null: a result "
                                    "read from schema 2 (not measured) or a run that measured nothing")

    @field_validator("started_at")
    @classmethod
    def _plausible_start(cls, v: datetime) -> datetime:
        return check_started_at(v)


# a run that claims to start outside these years is a corrupt or forged file; the site's date axes (and any
# reader's date arithmetic) cannot place it (year 1 once crashed `site build`: "year 0 is out of range")
EARLIEST_START = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_START = datetime(2200, 1, 1, tzinfo=UTC)


def check_started_at(v: datetime) -> datetime:
    # a start without a zone (`2026-11-01`) is read as UTC, as written: naive beside aware crashed `site build`
    aware = v if v.tzinfo is not None else v.replace(tzinfo=UTC)
    if not EARLIEST_START <= aware < LATEST_START:
        raise ValueError(f"{v.isoformat()} is not a plausible run start (expected a time between "
                         f"{EARLIEST_START.year} and {LATEST_START.year})")
    return aware


class ResultError(ValueError):
    """A result file is unreadable or invalid. `str()` names the file."""


# ---- migrations ---------------------------------------------------------------------------------------
# MIGRATIONS[v] turns a schema-v dict into a schema-(v+1) dict. Add one per schema bump; never edit old ones.
MIGRATIONS: dict[int, Any] = {
    1: lambda d: d,  # v2 added status `measured` and the optional `mode` / `step_times_s`: a v1 file is a v2 file
    2: lambda d: {**d, "goodput": None},  # v3 added `goodput`: a v2 file did not measure it (read, never rewritten)
}


def migrate(data: dict[str, Any], source: str) -> dict[str, Any]:
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ResultError(f"{source}: schema_version: missing or not an integer")
    if version > SCHEMA_VERSION:
        raise ResultError(
            f"{source}: schema_version {version} is newer than this trainbench understands ({SCHEMA_VERSION}); "
            "upgrade trainbench to read it"
        )
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise ResultError(f"{source}: no migration from schema_version {version}")
        try:
            data = MIGRATIONS[version](data)
        except Exception as e:  # noqa: BLE001 - a file the migration cannot handle is a bad file, named
            raise ResultError(f"{source}: migration from schema_version {version} failed: {type(e).__name__}: {e}") from None
        if not isinstance(data, dict):
            raise ResultError(f"{source}: migration from schema_version {version} did not return an object")
        version += 1
        data["schema_version"] = version
    return data


def parse_result(text: str, source: str) -> Result:
    try:
        data = json.loads(text)
    except ValueError as e:  # JSONDecodeError, and numbers too long to convert
        raise ResultError(f"{source}: not valid JSON (truncated or corrupt?): {e}") from None
    except RecursionError:
        raise ResultError(f"{source}: not a result: nested too deeply") from None
    if not isinstance(data, dict):
        raise ResultError(f"{source}: top level must be a JSON object")
    if _SURROGATE_ESCAPE.search(text):  # only a file with an escaped surrogate pays for the whole check
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # the index once crashed storing one, and no page can show it
            raise ResultError(f"{source}: a string holds a lone UTF-16 surrogate (an escape such as \\ud800 "
                              "without its pair): not text; regenerate the file") from None
    data = migrate(data, source)
    try:
        return Result.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()[:5])
        raise ResultError(f"{source}: {problems}") from None


def read_result(path: Path) -> Result:
    try:
        size = path.stat().st_size
        if size > MAX_RESULT_BYTES:
            raise ResultError(f"{path}: {size} bytes is larger than any real result ({MAX_RESULT_BYTES})")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ResultError(f"{path}: cannot read: {e}") from None
    return parse_result(text, str(path))


def result_files(root: Path) -> list[Path]:
    return json_files(root)


@dataclass
class Loaded:
    results: list[tuple[Path, Result]]
    errors: list[str]


def load_results(root: Path, strict: bool = False) -> Loaded:
    """Every valid result under root; bad files are named in `errors` (or raise under strict)."""
    good, bad = [], []
    for path in result_files(root):
        try:
            good.append((path, read_result(path)))
        except ResultError as e:
            if strict:
                raise
            bad.append(str(e))
    return Loaded(good, bad)


# ---- writing ------------------------------------------------------------------------------------------

_SLUG_RE = re.compile(r"[^a-z0-9._-]+")


def slug(text: str) -> str:
    s = _SLUG_RE.sub("-", text.lower()).strip("-.")
    return s[:80] or "unknown"


def new_run_id() -> str:
    return secrets.token_hex(4)


def result_path(root: Path, result: Result) -> Path:
    stamp = result.started_at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    domain, _, name = result.workload.partition("/")
    return root / slug(result.hardware.slug) / slug(domain) / slug(name) / slug(result.backend) / (
        f"{stamp}-{slug(result.run_id)}.json"
    )


def write_atomic(path: Path, text: str | bytes) -> Path:
    """Write `text` to a new file at `path` atomically; refuse to replace an existing file. FileExistsError means
    `path` exists (callers retry with a fresh id); a file where a folder must be is NotADirectoryError."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as e:
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory (a file stands where a folder must be)", e.filename) from e
    fd, tmp = create_temp(path.parent)  # the user's umask, not mkstemp's 0600
    try:
        with (os.fdopen(fd, "wb") if isinstance(text, bytes) else os.fdopen(fd, "w", encoding="utf-8")) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)  # fails with FileExistsError instead of replacing: results are append-only
    finally:
        os.unlink(tmp)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def write_result(root: Path, result: Result) -> Path:
    why = leads_out(root, result_path(root, result).parent)
    if why:
        raise ResultWriteError(result_path(root, result), why)
    while True:
        try:
            return write_atomic(result_path(root, result), result.model_dump_json(indent=1))
        except FileExistsError:  # same second, same run id (practically impossible): a fresh id, never an overwrite
            result.run_id = new_run_id()


def mllog_path(result_file: Path) -> Path:
    """Where the :::MLLOG side-car of a result file lives: beside it, same stem."""
    return result_file.with_suffix(".mllog")


class ResultWriteError(OSError):
    """The results folder cannot take the record (full, read-only, gone). `str()` names the path and the reason."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"cannot write result: {path}: {reason}")
        self.path, self.reason = path, reason


def side_file_path(result_file: Path, suffix: str) -> Path:
    """Where a run's other side-car (a workload's `side_files`, e.g. `.samples.png`) lives: beside it, same stem."""
    return result_file.with_suffix(suffix)


def write_run(root: Path, result: Result, mllog_text: str | None = None,
              side_files: dict[str, bytes] | None = None) -> Path:
    """The one write of a run's record: the MLLOG side-car first, then the result naming it (append-only).

    A result never names a side-car that does not exist: when the log cannot be written the result says so
    in its warnings and names none. When the result itself cannot be written, `ResultWriteError` names
    the path and the reason (the caller prints the measurements so nothing is lost).
    """
    path = result_path(root, result)
    why = leads_out(root, path.parent)  # suite/results/tree.py: what no reader would read is not written
    if why:
        raise ResultWriteError(path, why)
    try:
        clean_stale_temporaries(path.parent)
    except OSError:
        pass
    result.mllog = None
    if mllog_text:
        side = mllog_path(path)
        try:
            write_atomic(side, mllog_text)
            result.mllog = side.name
        except FileExistsError:
            pass  # a run id collision: the loop below picks a fresh id and the log is left out
        except OSError as e:
            result.warnings.append(f"the MLLOG log could not be written ({side}: {e.strerror or e}); none is kept")
    for suffix, data in (side_files or {}).items():  # written before the result, so a result never lacks its own
        try:
            write_atomic(side_file_path(path, suffix), data)
        except OSError as e:
            result.warnings.append(f"the run's {suffix} file could not be written: {e.strerror or e}")
    while True:
        try:
            return write_atomic(path, result.model_dump_json(indent=1))
        except FileExistsError:
            # same second, same run id (practically impossible) -> a fresh id, never an overwrite
            result.run_id, result.mllog = new_run_id(), None
            path = result_path(root, result)
        except OSError as e:
            if result.mllog:  # ours, seconds old, named by no result: leave no orphan behind
                try:
                    mllog_path(path).unlink()
                except OSError:
                    pass
            raise ResultWriteError(path, e.strerror or str(e)) from e


def now_utc() -> datetime:
    return datetime.now(UTC)

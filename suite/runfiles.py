"""The lean reader of result and baseline files: what compare and promote need of each run, grouped into sides.

Result files and baseline files are both "sides" of a comparison: `load_paths` reads either, so a PR can be
compared against blessed baselines or against a run of main on the same runner.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from suite import compare_key
from suite.baseline_schema import BASELINE_KIND, Baseline, parse_baseline
from suite.fingerprint import load_warning
from suite.noise_floor import FLOOR_KIND, NoiseFloor, parse_floor
from suite.results import (
    MAX_RESULT_BYTES,
    Result,
    ResultError,
    Status,
    check_started_at,
    parse_result,
)
from suite.results import SCHEMA_VERSION as RESULT_SCHEMA_VERSION
from suite.stats import RunFigures, figures_of, peak_memory, time_per_step

# ---- the lean reader ---------------------------------------------------------------------------------------
# Parsing a whole result (config, eval curve, software table) is nearly all of the cost of comparing 10,000
# files: the stdlib json module alone took ~8 s for 10,000 files of 15 KB on the dev machine, pydantic's full
# validation more. compare needs ~20 fields, so the lean path decodes straight into a msgspec Struct that
# declares only them: msgspec checks the type of every field it reads and skips the rest without building
# Python objects (~0.4 s for the same files). A type error names the file and the JSON path. `--validate` (and
# `trainbench results validate`) run the full pydantic schema; files of an older schema always go through the
# migrations and pydantic.


class _LeanCompare(msgspec.Struct, frozen=True):
    noise_floor: float | None = None


class _LeanSpec(msgspec.Struct, frozen=True):
    compare: _LeanCompare = _LeanCompare()
    backends: dict[str, Any] = {}
    throughput: dict[str, Any] = {}


class _LeanConfig(msgspec.Struct, frozen=True):
    spec: _LeanSpec = _LeanSpec()
    precision: str = "fp32"
    compile: bool = False
    mode: str = "tta"


class _LeanHardware(msgspec.Struct, frozen=True):
    slug: str
    cpu_cores: int = 1
    load_avg_start: list[float] | None = None
    load_avg_end: list[float] | None = None


class _LeanGit(msgspec.Struct, frozen=True):
    sha: str | None = None
    dirty: bool | None = None


class _LeanResult(msgspec.Struct, frozen=True):
    """The fields of a Result that compare and promote read; the rest of the file is skipped unbuilt."""

    schema_version: int
    run_id: str
    started_at: str
    workload: str
    workload_version: int
    spec_hash: str
    backend: str
    status: Status
    train_s: float
    steps: int
    hardware: _LeanHardware
    seed: int
    config: _LeanConfig = _LeanConfig()
    time_to_target_s: float | None = None
    steps_to_target: int | None = None
    throughput: dict[str, float] = {}
    step_time_s: dict[str, float] = {}
    mfu: float | None = None
    memory: dict[str, Any] = {}
    energy_j: float | None = None
    git: _LeanGit = _LeanGit()
    world_size: int = 1
    parallel: dict[str, Any] = {}
    mode: str = "tta"


class _Head(msgspec.Struct):
    schema_version: Any = None
    kind: Any = None


_LEAN = msgspec.json.Decoder(_LeanResult)
_HEAD = msgspec.json.Decoder(_Head)


@dataclass(frozen=True)
class SideKey:
    hardware: str
    workload: str
    backend: str


@dataclass
class Side:
    """The runs of one (hardware, workload, backend) on one side of a comparison, grouped by spec hash."""

    key: SideKey
    by_spec: dict[str, list[RunFigures]] = field(default_factory=lambda: defaultdict(list))
    workload_version: dict[str, int] = field(default_factory=dict)
    noise_floor: dict[str, float | None] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    comparison: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))  # per spec hash
    measured_floor: NoiseFloor | None = None  # an A/A-measured floor stored with the baseline (wins over the spec's)


def _noise_floor_of(config: dict[str, Any]) -> float | None:
    spec = config.get("spec") if isinstance(config, dict) else None
    cmp = spec.get("compare") if isinstance(spec, dict) else None
    v = cmp.get("noise_floor") if isinstance(cmp, dict) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class RunRecord:
    """What compare and promote need of one result file."""

    source: str
    key: SideKey
    spec_hash: str
    workload_version: int
    noise_floor: float | None
    figures: RunFigures
    git_dirty: bool
    comparison: dict[str, Any] = field(default_factory=dict)  # suite/compare_key.py

    @property
    def mode(self) -> str:
        return str(self.comparison.get("mode", "tta"))


def record_of_result(r: Result, source: str) -> RunRecord:
    return RunRecord(
        source, SideKey(r.hardware.slug, r.workload, r.backend), r.spec_hash, r.workload_version,
        _noise_floor_of(r.config), figures_of(r), bool(r.git.dirty),
        compare_key.key_of(r.config, backend=r.backend, world_size=r.world_size, parallel=r.parallel, mode=r.mode),
    )


def _lean_record(d: _LeanResult, source: str) -> RunRecord:
    try:
        started_at = check_started_at(datetime.fromisoformat(d.started_at)).isoformat()  # as a Result spells it
    except ValueError:
        raise ResultError(f"{source}: started_at: {d.started_at!r} is not an ISO 8601 time of a plausible "
                          "run start") from None
    figures = RunFigures.model_construct(  # every field was type-checked by the decoder
        run_id=d.run_id, seed=d.seed, status=d.status, time_to_target_s=d.time_to_target_s,
        steps_to_target=d.steps_to_target, time_per_step_s=time_per_step(d.step_time_s, d.train_s, d.steps),
        samples_per_s=d.throughput.get("samples_per_s"),
        mfu=d.mfu, peak_memory_bytes=peak_memory(d.memory), energy_j=d.energy_j, git_sha=d.git.sha,
        started_at=started_at, host_load=load_warning(d.hardware),
    )
    return RunRecord(
        source, SideKey(d.hardware.slug, d.workload, d.backend), d.spec_hash, d.workload_version,
        d.config.spec.compare.noise_floor, figures, bool(d.git.dirty),
        compare_key.key_of({"precision": d.config.precision, "compile": d.config.compile, "mode": d.config.mode,
                            "spec": {"backends": d.config.spec.backends, "throughput": d.config.spec.throughput}},
                           backend=d.backend, world_size=d.world_size, parallel=d.parallel, mode=d.mode),
    )


def read_file(path: Path, validate: bool = False) -> RunRecord | Baseline | NoiseFloor:
    """One result file (-> RunRecord) or baseline file (-> Baseline); ResultError names the file on failure."""
    source = str(path)
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_RESULT_BYTES + 1)  # bounded without a stat call per file
        if len(text) > MAX_RESULT_BYTES:
            raise ResultError(f"{source}: larger than any real result ({MAX_RESULT_BYTES} bytes)")
    except OSError as e:
        raise ResultError(f"{source}: cannot read: {e}") from None
    try:
        return _classify(text, source, validate)
    except RecursionError:  # msgspec and json both recurse per nesting level
        raise ResultError(f"{source}: not a result: nested too deeply") from None


def _classify(text: bytes, source: str, validate: bool) -> RunRecord | Baseline:
    if not validate:
        try:  # the common case first: a current result file, decoded once
            d = _LEAN.decode(text)
            if d.schema_version == RESULT_SCHEMA_VERSION:
                return _lean_record(d, source)
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass  # a baseline, an older schema, or a bad file: classified below, with a precise message
    try:
        head = _HEAD.decode(text)
    except msgspec.DecodeError as e:
        raise ResultError(f"{source}: not valid JSON (truncated or corrupt?): {e}") from None
    except msgspec.ValidationError:
        raise ResultError(f"{source}: top level must be a JSON object") from None
    if head.kind == BASELINE_KIND:
        return parse_baseline(json.loads(text), source)
    if head.kind == FLOOR_KIND:
        return parse_floor(json.loads(text), source)
    # an older schema, --validate, or a file the lean decoder refused: the full schema decides, so compare,
    # promote and `results validate` give one verdict per file (the lean decoder once refused "mfu": "NaN",
    # the writer's own encoding of a NaN, which the full schema reads)
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ResultError(f"{source}: cannot read: {e}") from None
    return record_of_result(parse_result(decoded, source), source)  # full schema, migrations, clear errors


@dataclass
class Loaded:
    records: list[RunRecord]
    baselines: list[tuple[str, Baseline]]
    errors: list[str]
    files: int
    floors: list[NoiseFloor] = field(default_factory=list)


def sides(loaded: Loaded) -> dict[SideKey, Side]:
    """Group every run (from results and from baselines' raw figures) by (hardware, workload, backend)."""
    out: dict[SideKey, Side] = {}
    seen: set[tuple[SideKey, str, str]] = set()
    for rec in loaded.records:
        side = out.setdefault(rec.key, Side(rec.key))
        if (rec.key, rec.spec_hash, rec.figures.run_id) in seen:
            continue  # the same run reached twice (a file under two given folders) counts once
        seen.add((rec.key, rec.spec_hash, rec.figures.run_id))
        side.by_spec[rec.spec_hash].append(rec.figures)
        side.workload_version[rec.spec_hash] = rec.workload_version
        side.noise_floor[rec.spec_hash] = rec.noise_floor
        side.comparison[rec.spec_hash].append(rec.comparison)
        side.sources.append(rec.source)
    for source, b in loaded.baselines:
        key = SideKey(b.hardware, b.workload, b.backend)
        side = out.setdefault(key, Side(key))
        fresh = [r for r in b.runs if (key, b.spec_hash, r.run_id) not in seen]  # a baseline and its own results
        seen.update((key, b.spec_hash, r.run_id) for r in fresh)
        side.by_spec[b.spec_hash].extend(fresh)
        side.workload_version[b.spec_hash] = b.workload_version
        side.noise_floor[b.spec_hash] = b.noise_floor
        if b.comparison_key is not None:
            side.comparison[b.spec_hash].append(b.comparison_key)
        side.sources.append(source)
    for f in loaded.floors:
        key = SideKey(f.hardware, f.workload, f.backend)
        out.setdefault(key, Side(key)).measured_floor = f
    return out

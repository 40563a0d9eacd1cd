"""Baselines: the per-seed figures compare needs, read from result files (a lean path) or baseline files, and promote.

A baseline file `baselines/<hardware>/<domain>/<workload>/<backend>.json` holds, for one spec hash on one
hardware, the aggregate over N seeds AND every seed's raw figures (the test in compare needs the runs, not
only their mean), plus where they came from. Result files and baseline files are both "sides" of a
comparison: `load_side` reads either, so a PR can be compared against blessed baselines or against a run of
main on the same runner.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from suite import compare_key, stats
from suite.noise_floor import FLOOR_KIND, NoiseFloor, parse_floor
from suite.results import (
    MAX_RESULT_BYTES,
    Result,
    ResultError,
    Status,
    parse_result,
    slug,
)
from suite.results import SCHEMA_VERSION as RESULT_SCHEMA_VERSION

BASELINE_SCHEMA_VERSION = 1
BASELINE_KIND: Final = "trainbench-baseline"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunFigures(_Model):
    """One seed's figures, as compare uses them. None = not measured; a run that did not reach the target has
    time_to_target_s None and counts as infinitely slow (see `tta`)."""

    run_id: str
    seed: int
    status: str
    time_to_target_s: float | None = None
    steps_to_target: int | None = None
    time_per_step_s: float | None = Field(default=None, description="median step time (p50), else train_s/steps")
    samples_per_s: float | None = None
    mfu: float | None = None
    peak_memory_bytes: float | None = Field(default=None, description="device allocator peak, else host peak RSS")
    energy_j: float | None = None
    git_sha: str | None = None
    started_at: str | None = None

    @property
    def reached(self) -> bool:
        return self.status == "reached" and self.time_to_target_s is not None

    def tta(self) -> float:
        return self.time_to_target_s if self.reached else math.inf  # type: ignore[return-value]

    def steps(self) -> float:
        return float(self.steps_to_target) if self.reached and self.steps_to_target is not None else math.inf


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


class Baseline(_Model):
    schema_version: int = BASELINE_SCHEMA_VERSION
    kind: Literal["trainbench-baseline"] = BASELINE_KIND
    hardware: str
    workload: str
    workload_version: int
    backend: str
    spec_hash: str
    noise_floor: float | None = Field(description="the spec's compare.noise_floor (None: compare's default)")
    comparison_key: dict[str, Any] | None = Field(default=None, description="suite/compare_key.py: precision, ...")
    aggregate: BaselineAggregate
    runs: list[RunFigures] = Field(min_length=1)
    provenance: Provenance


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


def _peak_memory(memory: dict[str, Any]) -> float | None:
    for key in ("device_peak_allocated_bytes", "host_peak_rss_bytes"):
        v = memory.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
    return None


def figures_of(r: Result) -> RunFigures:
    """The figures of a fully validated Result."""
    tps = r.step_time_s.get("p50")
    if tps is None and r.steps > 0:
        tps = r.train_s / r.steps
    return RunFigures(
        run_id=r.run_id, seed=r.seed, status=r.status, time_to_target_s=r.time_to_target_s,
        steps_to_target=r.steps_to_target, time_per_step_s=tps, samples_per_s=r.throughput.get("samples_per_s"),
        mfu=r.mfu, peak_memory_bytes=_peak_memory(r.memory), energy_j=r.energy_j, git_sha=r.git.sha,
        started_at=r.started_at.isoformat(),
    )


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
        started_at = datetime.fromisoformat(d.started_at).isoformat()  # spelt as a validated Result's
    except ValueError:
        raise ResultError(f"{source}: started_at: {d.started_at!r} is not an ISO 8601 time") from None
    tps = d.step_time_s.get("p50")
    if tps is None and d.steps:
        tps = d.train_s / d.steps
    figures = RunFigures.model_construct(  # every field was type-checked by the decoder
        run_id=d.run_id, seed=d.seed, status=d.status, time_to_target_s=d.time_to_target_s,
        steps_to_target=d.steps_to_target, time_per_step_s=tps, samples_per_s=d.throughput.get("samples_per_s"),
        mfu=d.mfu, peak_memory_bytes=_peak_memory(d.memory), energy_j=d.energy_j, git_sha=d.git.sha,
        started_at=started_at,
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
    if validate or head.schema_version != RESULT_SCHEMA_VERSION:
        try:
            decoded = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ResultError(f"{source}: cannot read: {e}") from None
        return record_of_result(parse_result(decoded, source), source)  # full schema, migrations, clear errors
    try:
        _LEAN.decode(text)
    except msgspec.ValidationError as e:
        raise ResultError(f"{source}: {e}") from None
    raise AssertionError("unreachable: a current result that decodes was returned above")


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


def json_files(root: Path) -> list[Path]:
    """The *.json files under root, sorted, hidden (temporary) files left out: results.result_files's set,
    walked with os.walk, which is ~3x faster than Path.rglob on 10,000 files."""
    if root.is_file():
        return [root]
    found = [
        os.path.join(folder, name)
        for folder, _, names in os.walk(root)
        for name in names
        if name.endswith(".json") and not name.startswith(".")
    ]
    return [Path(p) for p in sorted(found)]


@dataclass
class Loaded:
    records: list[RunRecord]
    baselines: list[tuple[str, Baseline]]
    errors: list[str]
    files: int
    floors: list[NoiseFloor] = field(default_factory=list)


def load_paths(paths: Iterable[Path], strict: bool = False, validate: bool = False) -> Loaded:
    """Every result and baseline file under `paths`; bad files are named in `errors` (or raise under strict)."""
    records: list[RunRecord] = []
    baselines: list[tuple[str, Baseline]] = []
    floors: list[NoiseFloor] = []
    errors: list[str] = []
    files = 0
    for root in paths:
        if not root.exists():
            raise ResultError(f"{root}: no such file or folder")
        for path in json_files(root):
            files += 1
            try:
                item = read_file(path, validate)
            except ResultError as e:
                if strict:
                    raise
                errors.append(str(e))
                continue
            if isinstance(item, Baseline):
                baselines.append((str(path), item))
            elif isinstance(item, NoiseFloor):
                floors.append(item)
            else:
                records.append(item)
    return Loaded(records, baselines, errors, files, floors)


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


# ---- promote -------------------------------------------------------------------------------------------------


class PromoteError(ValueError):
    """Promotion refused; the message says which results conflict and what to pass instead."""


def _finite_or_none(x: float | None) -> float | None:
    return None if x is None or math.isinf(x) or math.isnan(x) else x


def _median(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return _finite_or_none(stats.median(xs)) if xs else None


def aggregate_figures(runs: Sequence[RunFigures]) -> BaselineAggregate:
    ttas = [r.tta() for r in runs]
    lo, hi = stats.spread(ttas)
    reached = sum(r.reached for r in runs)
    return BaselineAggregate(
        runs=len(runs), reached=reached, success_rate=reached / len(runs),
        tta_olympic_s=_finite_or_none(stats.olympic_mean(ttas)), tta_median_s=_finite_or_none(stats.median(ttas)),
        tta_min_s=_finite_or_none(lo), tta_max_s=_finite_or_none(hi),
        steps_to_target_median=_finite_or_none(stats.median([r.steps() for r in runs])),
        time_per_step_median_s=_median([r.time_per_step_s for r in runs]),
        samples_per_s_median=_median([r.samples_per_s for r in runs]),
        mfu_median=_median([r.mfu for r in runs]),
        peak_memory_median_bytes=_median([r.peak_memory_bytes for r in runs]),
        energy_median_j=_median([r.energy_j for r in runs]),
    )


def baseline_path(root: Path, b: Baseline) -> Path:
    domain, _, name = b.workload.partition("/")
    return root / slug(b.hardware) / slug(domain) / slug(name) / f"{slug(b.backend)}.json"


def build_baselines(
    records: Sequence[RunRecord], min_seeds: int = 3, promoted_by_git_sha: str | None = None,
) -> list[Baseline]:
    """One Baseline per (workload, backend); refuses mixed spec hashes or hardware within one of them."""
    by_wb: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for rec in records:
        by_wb[(rec.key.workload, rec.key.backend)].append(rec)
    problems: list[str] = []
    out: list[Baseline] = []
    now = datetime.now(UTC).isoformat(timespec="seconds")
    for (workload, backend), recs in sorted(by_wb.items()):
        for label, attr, flag in (("hardware", lambda r: r.key.hardware, "--hardware SLUG"),
                                  ("spec hashes", lambda r: r.spec_hash, "--spec-hash HASH"),
                                  ("configurations", lambda r: json.dumps(r.comparison, sort_keys=True),
                                   "the result files of one precision / compile / process count")):
            groups: dict[str, list[str]] = defaultdict(list)
            for rec in recs:
                groups[attr(rec)].append(rec.source)
            if len(groups) > 1:
                listing = "; ".join(f"{k}: {len(v)} run(s), e.g. {v[0]}" for k, v in sorted(groups.items()))
                problems.append(
                    f"{workload} on {backend}: mixed {label} ({listing}). A baseline aggregates runs of one spec "
                    f"on one machine: pass only those result files, or select with {flag}"
                )
        if any(p.startswith(f"{workload} on {backend}") for p in problems):
            continue
        if len(recs) < min_seeds:
            problems.append(
                f"{workload} on {backend}: {len(recs)} run(s); a baseline needs at least {min_seeds} seeds "
                f"(run more with `trainbench run {workload} --backend {backend} --seeds N`, or pass --min-seeds)"
            )
            continue
        seeds = [r.figures.seed for r in recs]
        if len(set(seeds)) != len(seeds):
            dup = sorted({s for s in seeds if seeds.count(s) > 1})
            problems.append(f"{workload} on {backend}: seed(s) {dup} appear twice; a baseline counts each seed once")
            continue
        runs = sorted((r.figures for r in recs), key=lambda f: f.seed)
        started = sorted(r.started_at for r in runs if r.started_at)
        first = recs[0]
        out.append(Baseline(
            hardware=first.key.hardware, workload=workload, workload_version=first.workload_version,
            backend=backend, spec_hash=first.spec_hash, noise_floor=first.noise_floor,
            comparison_key=first.comparison or None,
            aggregate=aggregate_figures(runs), runs=runs,
            provenance=Provenance(
                run_ids=[r.run_id for r in runs], result_files=sorted(r.source for r in recs),
                result_git_shas=sorted({r.git_sha for r in runs if r.git_sha}),
                result_git_dirty=any(r.git_dirty for r in recs),
                first_run_at=started[0] if started else None, last_run_at=started[-1] if started else None,
                promoted_at=now, promoted_by_git_sha=promoted_by_git_sha,
            ),
        ))
    if problems:
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise PromoteError("refusing to promote:\n  " + "\n  ".join(problems[:10]) + more)
    return out


def checkout_sha() -> str | None:
    """The trainbench checkout's commit, as suite.environment.git_info finds it, without importing torch (which
    environment's device probe does): promote is a JSON-only command and should start in a blink."""
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"]
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent.parent,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def write_baseline(root: Path, b: Baseline, replace: bool = False) -> Path:
    """Write atomically (temp file + rename); an existing baseline is replaced only with replace=True."""
    path = baseline_path(root, b)
    if path.exists() and not replace:
        raise PromoteError(f"{path} exists; pass --replace to bless the new runs (git keeps the old baseline)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(b.model_dump_json(indent=1) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path

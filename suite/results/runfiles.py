"""The lean reader of result and baseline files: what compare and promote need of each run, grouped into sides.

Result files and baseline files are both "sides" of a comparison: `load_paths` reads either, so a PR can be
compared against blessed baselines or against a run of main on the same runner.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from suite.results import key as compare_key
from suite.results.baseline_schema import BASELINE_KIND, Baseline, parse_baseline
from suite.results.lean import DECODER as LEAN_DECODER
from suite.results.lean import LeanResult, started_at_iso
from suite.results.noise_floor import FLOOR_KIND, NoiseFloor, parse_floor
from suite.results.rcp import RCP, RCP_KIND, parse_rcp
from suite.results.record import MAX_RESULT_BYTES, Result, ResultError, parse_result
from suite.results.record import SCHEMA_VERSION as RESULT_SCHEMA_VERSION
from suite.results.stats import RunFigures, figures_of

# ---- the lean reader ---------------------------------------------------------------------------------------
# Parsing a whole result (config, eval curve, software table) is nearly all of the cost of comparing 10,000
# files: the stdlib json module alone took ~8 s for 10,000 files of 15 KB on the dev machine, pydantic's full
# validation more. So a current result file is decoded straight into suite/results/lean.py's msgspec mirror of
# Result, which checks every field as strictly as the schema does and skips `config` unbuilt (~0.4 s for the
# same files). A file the mirror refuses goes to the full pydantic schema (with the migrations), which decides
# and words the error: one verdict per file for every reader. `--validate` always takes the full schema.


class _Head(msgspec.Struct):
    schema_version: Any = None
    kind: Any = None


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
    comparison: dict[str, Any] = field(default_factory=dict)  # suite/results/key.py
    imported_system: str | None = None  # "submitter/system" of a published (imported) result, else None

    @property
    def mode(self) -> str:
        return str(self.comparison.get("mode", "tta"))


def record_of_result(r: Result, source: str) -> RunRecord:
    return RunRecord(
        source, SideKey(r.hardware.slug, r.workload, r.backend), r.spec_hash, r.workload_version,
        _noise_floor_of(r.config), figures_of(r), bool(r.git.dirty),
        compare_key.key_of(r.config, backend=r.backend, world_size=r.world_size, parallel=r.parallel, mode=r.mode),
        f"{r.imported.submitter}/{r.imported.system}" if r.imported else None,
    )


def _lean_record(d: LeanResult, started_at: str, source: str) -> RunRecord:
    figures = figures_of(d, started_at)  # every field was type-checked by the decoder
    return RunRecord(
        source, SideKey(d.hardware.slug, d.workload, d.backend), d.spec_hash, d.workload_version,
        d.config.spec.compare.noise_floor, figures, bool(d.git.dirty),
        compare_key.key_of({"precision": d.config.precision, "compile": d.config.compile, "mode": d.config.mode,
                            "spec": {"backends": d.config.spec.backends, "throughput": d.config.spec.throughput}},
                           backend=d.backend, world_size=d.world_size, parallel=d.parallel, mode=d.mode),
        f"{d.imported.submitter}/{d.imported.system}" if d.imported else None,
    )


def read_file(path: Path, validate: bool = False) -> RunRecord | Baseline | NoiseFloor | RCP:
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


def _lean(text: bytes, source: str) -> RunRecord | None:
    """The record of a current result file that the lean mirror accepts (and so the full schema would); None
    sends the file to the full schema, which decides and words the error."""
    try:
        d = LEAN_DECODER.decode(text)
        if d.schema_version != RESULT_SCHEMA_VERSION:
            return None  # an older schema goes through the migrations; a newer one is refused there
        started_at = started_at_iso(d.started_at)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        return None
    return _lean_record(d, started_at, source)


def _classify(text: bytes, source: str, validate: bool) -> RunRecord | Baseline | NoiseFloor | RCP:
    if not validate:  # the common case first: a current result file, decoded once
        record = _lean(text, source)
        if record is not None:
            return record
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ResultError(f"{source}: cannot read: {e}") from None
    try:
        kind = _HEAD.decode(text).kind
    except msgspec.ValidationError:
        raise ResultError(f"{source}: top level must be a JSON object") from None
    except msgspec.DecodeError:  # JSON that Python's json reads and msgspec does not (a bare NaN, a lone
        kind = None  # surrogate) is not refused here: the full reader below judges it as `results validate` does
    if kind == BASELINE_KIND:
        return parse_baseline(json.loads(decoded), source)
    if kind == FLOOR_KIND:
        return parse_floor(json.loads(decoded), source)
    if kind == RCP_KIND:
        return parse_rcp(json.loads(decoded), source)
    # an older schema, --validate, or a file the lean mirror refused: the full schema decides, so every reader
    # gives one verdict per file (the lean decoder once refused "mfu": "NaN", the writer's own encoding of a NaN,
    # and accepted unknown fields, which the full schema refuses)
    return record_of_result(parse_result(decoded, source), source)  # full schema, migrations, clear errors


@dataclass
class Loaded:
    records: list[RunRecord]
    baselines: list[tuple[str, Baseline]]
    errors: list[str]
    files: int
    floors: list[NoiseFloor] = field(default_factory=list)
    rcps: list[RCP] = field(default_factory=list)  # reference convergence points beside the baselines


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

"""Baselines: the typed reader of a baselines folder, and promote (results -> blessed baseline files).

The file schema is suite/results/baseline_schema.py; the lean reader of result and baseline files that compare
uses is suite/results/runfiles.py (both re-exported here, where compare and the CLI look for them).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from suite.results import stats
from suite.results.baseline_schema import (
    Baseline,
    BaselineAggregate,
    Provenance,
    read_baseline,
)
from suite.results.noise_floor import NoiseFloor
from suite.results.rcp import RCP
from suite.results.record import ResultError, slug
from suite.results.runfiles import (
    Loaded,
    RunRecord,
    read_file,
)
from suite.results.stats import RunFigures
from suite.results.tree import create_temp, json_files


def load_baselines(root: Path) -> tuple[list[tuple[Path, Baseline]], list[str]]:
    """Every baseline file under `root` (sorted), typed; a bad file is named in the errors and skipped."""
    found: list[tuple[Path, Baseline]] = []
    errors: list[str] = []
    for path in json_files(root):
        if ".rcp-" in path.name:  # a reference convergence point beside the baseline (suite/results/rcp.py)
            continue
        try:
            found.append((path, read_baseline(path)))
        except ResultError as e:
            errors.append(str(e))
    return found, errors


# ---- promote -------------------------------------------------------------------------------------------------


class PromoteError(ValueError):
    """Promotion refused; the message says which results conflict and what to pass instead."""


def aggregate_figures(runs: Sequence[RunFigures]) -> BaselineAggregate:
    """A baseline's stored aggregate: suite.results.stats.aggregate, the same figures as a leaderboard row."""
    return BaselineAggregate.of(stats.aggregate(runs))


def baseline_path(root: Path, b: Baseline) -> Path:
    domain, _, name = b.workload.partition("/")
    return root / slug(b.hardware) / slug(domain) / slug(name) / f"{slug(b.backend)}.json"


THROUGHPUT_NOT_A_BASELINE = (
    "throughput results (`run --mode throughput`) are not baselines: they are compared folder to folder, both "
    "commits on the same runner (`trainbench ab --base main --head HEAD`, then `trainbench compare --baseline "
    "ab/base --candidate ab/head`)")


def throughput_records(records: Sequence[RunRecord]) -> list[RunRecord]:
    """The throughput-mode results among these: a baseline of them would read "0 reached, time to target inf"."""
    return [r for r in records if r.mode == "throughput"]


def build_baselines(
    records: Sequence[RunRecord], min_seeds: int = stats.DEFAULT_MIN_SEEDS, promoted_by_git_sha: str | None = None,
) -> list[Baseline]:
    """One Baseline per (workload, backend); refuses mixed spec hashes or hardware within one of them, and
    throughput-mode results."""
    if thr := throughput_records(records):
        raise PromoteError(f"refusing to promote {len(thr)} throughput result(s), e.g. {thr[0].source}: "
                           f"{THROUGHPUT_NOT_A_BASELINE}")
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
    """The trainbench checkout's commit, as suite.measure.environment.git_info finds it, without importing torch (which
    environment's device probe does): promote is a JSON-only command and should start in a blink."""
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"]
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parents[2],
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
    fd, tmp = create_temp(path.parent)  # the user's umask, as open() would (mkstemp: 0600)
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


def load_paths(paths: Iterable[Path], strict: bool = False, validate: bool = False) -> Loaded:
    """Every result and baseline file under `paths`; bad files are named in `errors` (or raise under strict)."""
    from suite.results import index

    records: list[RunRecord] = []
    baselines: list[tuple[str, Baseline]] = []
    floors: list[NoiseFloor] = []
    rcps: list[RCP] = []
    errors: list[str] = []
    files = 0
    for root in paths:
        if not root.exists():
            raise ResultError(f"{root}: no such file or folder")
        if index.enabled(root):  # a folder: through the results index (suite/results/index), updated by enabled(), or
            part = index.compare_inputs(root, strict, validate, refresh=False)  # warned and off: the files
            records += part.records
            baselines += part.baselines
            errors += part.errors
            files += part.files
            floors += part.floors
            rcps += part.rcps
            continue
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
            elif isinstance(item, RCP):
                rcps.append(item)
            else:
                records.append(item)
    return Loaded(records, baselines, errors, files, floors, rcps)

"""Reference Convergence Points (MLPerf's RCPs) for TrainBench's own workloads, made from blessed baselines.

An RCP is, for one workload at one global batch size, the samples each reference seed needed to reach the target
(MLPerf's `Epochs to converge`, which for every 6.x benchmark counts samples). compare tests a candidate's
samples to target against it with mlperf_logging.rcp_checker's own method (suite/compare/rcp_guard.py).

Files are append-only like the results: `baselines/<hardware>/<domain>/<name>/<backend>.rcp-<utc-stamp>.json`,
never rewritten; the newest one of a spec hash is the one in force (git and the folder keep the older ones).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from suite.results.baseline_schema import Baseline
from suite.results.record import ResultError, slug
from suite.results.tree import create_temp

RCP_KIND: Final = "trainbench-rcp"
RCP_SCHEMA_VERSION = 1
# MLPerf: "References need 2x of these runs" (rcp_checker.submission_runs); compare's fewest seeds a side is 4,
# and the olympic mean drops two, so 8 reference seeds leave 6 in the mean.
DEFAULT_MIN_RCP_SEEDS = 8


class RCPError(ValueError):
    """An RCP cannot be made (too few seeds that reached the target, no batch size); the message says what to do."""


class RCP(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = RCP_SCHEMA_VERSION
    kind: Literal["trainbench-rcp"] = RCP_KIND
    benchmark: str = Field(description="the workload, e.g. cv/digits_cnn (MLPerf's `Benchmark`)")
    hardware: str = Field(description="where the reference seeds ran (convergence should not depend on it)")
    backend: str
    spec_hash: str
    global_batch_size: int = Field(gt=0, description="MLPerf's `BS`: samples per optimizer step over all ranks")
    unit: Literal["samples"] = "samples"
    samples_to_target: list[int] = Field(min_length=3, description="one per reached reference seed")
    steps_to_target: list[int]
    seeds: list[int]
    unreached_seeds: list[int] = Field(default_factory=list, description="reference seeds that never reached it")
    hyperparams: dict[str, Any] = Field(default_factory=dict)
    made_from: str = Field(description="the baseline file the seeds come from")
    made_at: str
    made_by_git_sha: str | None = None
    _source: str = PrivateAttr(default="")

    @property
    def source(self) -> str:
        return self._source

    def as_mlperf(self) -> dict[str, Any]:
        """The record in mlperf_logging's raw RCP format (what `--custom_rcps` reads)."""
        return {f"{self.benchmark}_ref_{self.global_batch_size}": {
            "Benchmark": self.benchmark, "Creator": "trainbench", "When": self.made_at, "Platform": self.hardware,
            "BS": self.global_batch_size, "Hyperparams": self.hyperparams,
            "Epochs to converge": list(self.samples_to_target)}}


def build_rcp(baseline: Baseline, source: str, global_batch_size: int, min_seeds: int = DEFAULT_MIN_RCP_SEEDS,
              git_sha: str | None = None) -> RCP:
    """The RCP of one blessed baseline: every reached seed's steps to target x the global batch size."""
    if global_batch_size <= 0:
        raise RCPError(f"--global-batch-size {global_batch_size}: must be a positive number of samples per step")
    reached = [r for r in baseline.runs if r.reached and r.steps_to_target is not None]
    if len(reached) < min_seeds:
        raise RCPError(
            f"{source}: {len(reached)} seed(s) reached the target; an RCP needs at least {min_seeds} (MLPerf asks "
            f"twice a submission's seeds): promote a baseline of more seeds (`trainbench run {baseline.workload} "
            f"--seeds {2 * min_seeds}`), or pass --min-seeds")
    reached.sort(key=lambda r: r.seed)
    return RCP(
        benchmark=baseline.workload, hardware=baseline.hardware, backend=baseline.backend,
        spec_hash=baseline.spec_hash, global_batch_size=global_batch_size,
        samples_to_target=[int(r.steps_to_target) * global_batch_size for r in reached],  # type: ignore[arg-type]
        steps_to_target=[int(r.steps_to_target) for r in reached],  # type: ignore[arg-type]
        seeds=[r.seed for r in reached], unreached_seeds=sorted(r.seed for r in baseline.runs if not r.reached),
        made_from=source, made_at=datetime.now(UTC).isoformat(timespec="seconds"), made_by_git_sha=git_sha)


def rcp_path(root: Path, r: RCP) -> Path:
    domain, _, name = r.benchmark.partition("/")
    stamp = r.made_at.replace("-", "").replace(":", "").replace("+0000", "Z")
    return root / slug(r.hardware) / slug(domain) / slug(name) / f"{slug(r.backend)}.rcp-{slug(stamp)}.json"


def write_rcp(root: Path, r: RCP) -> Path:
    """Append-only: a new file each time (os.link refuses an existing name), never a rewrite."""
    path = rcp_path(root, r)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp(path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(json.dumps(r.model_dump(mode="json"), indent=1) + "\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise RCPError(f"{path} exists: RCP files are never rewritten (made twice in one second?)") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def parse_rcp(data: dict[str, Any], source: str) -> RCP:
    if data.get("schema_version") != RCP_SCHEMA_VERSION:
        raise ResultError(f"{source}: RCP schema_version {data.get('schema_version')!r}; this trainbench reads "
                          f"{RCP_SCHEMA_VERSION} (make it again with `trainbench baseline rcp`)")
    try:
        r = RCP.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()[:5])
        raise ResultError(f"{source}: {problems}") from None
    if not (len(r.samples_to_target) == len(r.steps_to_target) == len(r.seeds)):
        raise ResultError(f"{source}: samples_to_target, steps_to_target and seeds must have one entry per seed")
    r._source = source
    return r


def newest(rcps: list[RCP]) -> dict[tuple[str, str], RCP]:
    """The RCP in force per (workload, spec hash): the newest made."""
    out: dict[tuple[str, str], RCP] = {}
    for r in sorted(rcps, key=lambda r: (r.made_at, r.source)):
        out[(r.benchmark, r.spec_hash)] = r
    return out


def load_rcps(root: Path | None) -> tuple[list[RCP], list[str]]:
    """Every RCP file under `root` (the baselines folder); a bad one is named in the errors and skipped."""
    from suite.results.tree import json_files

    found: list[RCP] = []
    errors: list[str] = []
    if root is None or not root.exists():
        return found, errors
    for path in json_files(root):
        if ".rcp-" not in path.name:
            continue
        try:
            found.append(parse_rcp(json.loads(path.read_text(encoding="utf-8")), str(path)))
        except (OSError, ValueError) as e:  # ResultError and JSONDecodeError are ValueErrors
            errors.append(str(e) if isinstance(e, ResultError) else f"{path}: {e}")
    return found, errors

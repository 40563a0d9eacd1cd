"""What is recorded for a run whose process ended without reporting: the result file it may still have written
(`find_by_run_id`), else a result that says why it measured nothing (`error_result`). The launchers' one road."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from suite.results.record import (
    GitInfo,
    HardwareInfo,
    Result,
    ResultError,
    Status,
    new_run_id,
    now_utc,
    read_result,
)


def find_by_run_id(root: Path | None, run_id: str) -> tuple[Path, Result] | None:
    """A run's result file by its id (a child may have written it and died before reporting)."""
    if root is None or not root.exists():
        return None
    for path in root.rglob(f"*-{run_id}.json"):
        try:
            return path, read_result(path)
        except ResultError:
            continue
    return None


def error_result(req: Any, status: Status, error: str, fingerprint: tuple[HardwareInfo, dict[str, str | None], GitInfo],
                 run_id: str | None = None, world_size: int = 1) -> Result:
    """The one constructor of a run that measured nothing (its worker died, its node was lost, no data):
    the run's identity and configuration (a RunRequest), the status and why, where it ran
    (`environment.fingerprint()`)."""
    spec = req.spec
    hardware, software, git = fingerprint
    return Result(
        run_id=run_id or new_run_id(), started_at=now_utc(), workload=spec.name, workload_version=spec.version,
        spec_hash=spec.spec_hash(), backend=req.backend, tier=req.tier,
        config={"spec": spec.canonical(), "spec_source": req.spec_source, "overrides": req.overrides,
                "variant": req.variant, "precision": req.precision, "compile": req.compile, "threads": req.threads,
                **req.extra_config},
        parallel={"dp": world_size}, status=status, train_s=0.0, eval_s=0.0, init_s=0.0, total_s=0.0, steps=0,
        samples=0, hardware=hardware, software=software, git=git, seed=req.seed, world_size=world_size, error=error[-8000:],
    )

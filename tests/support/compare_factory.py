"""Builds real Result objects (and files, via suite.results.record.write_result) for the compare and baseline tests.

A simulated run: steps to target and time per step each vary with a log-normal spread around their centres,
time to target = steps x time per step + evaluation time, so the attribution has a true answer.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from suite.results.record import GitInfo, HardwareInfo, Result, write_result
from suite.results.stats import RunFigures

HW = "cpu-test-2c"
START = datetime(2026, 12, 1, tzinfo=UTC)


def make_result(
    seed: int, *, steps_to_target: int | None, time_per_step_s: float, status: str = "reached",
    workload: str = "cv/digits_cnn", backend: str = "torch", hardware: str = HW, spec_hash: str = "spec0001",
    noise_floor: float | None = None, eval_s: float = 0.5, batch: int = 64, peak_memory_bytes: int = 2**30,
    mfu: float | None = 0.3, energy_j: float | None = None, run_id: str | None = None,
) -> Result:
    reached = status == "reached" and steps_to_target is not None
    steps = steps_to_target if reached else 4000
    train_s = steps * time_per_step_s
    tta = train_s + eval_s if reached else None
    return Result(
        run_id=run_id or f"r{seed:04d}{random.getrandbits(24):06x}",
        started_at=START + timedelta(minutes=seed),
        workload=workload, workload_version=1, spec_hash=spec_hash, backend=backend,
        config={"spec": {"name": workload, "compare": {"noise_floor": noise_floor}}},
        status=status, time_to_target_s=tta, train_s=train_s, eval_s=eval_s, init_s=1.0, total_s=train_s + eval_s,
        steps=steps, samples=steps * batch, steps_to_target=steps_to_target if reached else None,
        throughput={"samples_per_s": batch / time_per_step_s},
        step_time_s={"p50": time_per_step_s, "mean": time_per_step_s},
        mfu=mfu, memory={"host_peak_rss_bytes": peak_memory_bytes, "source": "test"}, energy_j=energy_j,
        hardware=HardwareInfo(slug=hardware, device_type="cpu", device_name="test cpu", device_count=1,
                              cpu_model="test cpu", cpu_cores=2),
        git=GitInfo(sha="0123abcd", dirty=False), seed=seed,
        error=None if status in ("reached", "budget") else f"{status} in test",
    )


def noisy_runs(
    rng: random.Random, n: int, *, steps: float = 1000, time_per_step_s: float = 0.01, cv_steps: float = 0.05,
    cv_time: float = 0.03, fail_p: float = 0.0, first_seed: int = 0, **kw,
) -> list[Result]:
    out = []
    for i in range(n):
        failed = rng.random() < fail_p
        s = max(1, round(steps * math.exp(rng.gauss(0, cv_steps))))
        t = time_per_step_s * math.exp(rng.gauss(0, cv_time))
        out.append(make_result(first_seed + i, steps_to_target=None if failed else s, time_per_step_s=t,
                               status="budget" if failed else "reached", **kw))
    return out


def write_all(root: Path, results: list[Result]) -> Path:
    for r in results:
        write_result(root, r)
    return root


def figures(rng: random.Random, n: int, **kw) -> list[RunFigures]:
    """The same simulation straight to RunFigures, for the many-set false-alarm test."""
    from suite.results.stats import figures_of

    return [figures_of(r) for r in noisy_runs(rng, n, **kw)]

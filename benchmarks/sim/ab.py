"""Throughput-mode results (status `measured`, every step's time) for the A/B compare tests and
benchmarks/gate_power.py's simulation.

The noise model follows what `trainbench ab` sees on a shared machine: each round moves both sides' level
together (a neighbour, the clock; `round_sd`), each run has its own level on top (`run_sd`), and steps vary
around it log-normally (`step_sd`) with rare slow outliers (`outlier_p`, x1.5-3); in lockstep, step i of both
sides also shares what that moment did to both (`moment_sd`: a neighbour's burst lasting a step or two).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from benchmarks.sim.results import make_result
from suite.results.record import GitInfo, HardwareInfo, Result, write_result

HW = "cpu-test-2c"
START = datetime(2026, 12, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Noise:
    round_sd: float = 0.05
    run_sd: float = 0.01
    step_sd: float = 0.05
    outlier_p: float = 0.01
    moment_sd: float = 0.0


def simulate(rng: np.random.Generator, rounds: int, steps: int, slowdown: float = 1.0, median_s: float = 0.01,
             noise: Noise = Noise()) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(base runs, head runs): one run a side per round; head's steps are `slowdown` times slower."""
    base, head = [], []
    for _ in range(rounds):
        level = median_s * np.exp(rng.normal(0, noise.round_sd))
        moment = rng.normal(0, noise.moment_sd, steps) if noise.moment_sd > 0 else 0.0
        for out, factor in ((base, 1.0), (head, slowdown)):
            run_level = level * factor * np.exp(rng.normal(0, noise.run_sd))
            t = run_level * np.exp(rng.normal(0, noise.step_sd, steps) + moment)
            spikes = rng.random(steps) < noise.outlier_p
            t[spikes] *= rng.uniform(1.5, 3.0, spikes.sum())
            out.append(t)
    return base, head


def throughput_result(seed: int, times: list[float] | np.ndarray, *, workload: str = "cv/digits_cnn",
                      backend: str = "torch", hardware: str = HW, spec_hash: str = "spec0001",
                      precision: str = "fp32", compile_: bool = False, world_size: int = 1,
                      noise_floor: float | None = None, status: str = "measured", git_sha: str = "0123abcd",
                      warmup_steps: int = 20) -> Result:
    times = [float(t) for t in times]
    train_s = sum(times)
    return make_result(
        run_id=f"t{seed:04d}{abs(hash((seed, git_sha, train_s))) % 16**6:06x}",
        started_at=START + timedelta(minutes=seed), workload=workload, workload_version=1, spec_hash=spec_hash,
        backend=backend, mode="throughput", status=status,  # type: ignore[arg-type]
        config={"spec": {"name": workload, "compare": {"noise_floor": noise_floor},
                         "throughput": {"warmup_steps": warmup_steps, "measure_steps": len(times)}},
                "mode": "throughput", "precision": precision, "compile": compile_},
        parallel={"dp": world_size}, world_size=world_size, step_times_s=times,
        train_s=train_s, eval_s=0.0, init_s=1.0, total_s=train_s, steps=len(times), samples=64 * len(times),
        throughput={"samples_per_s": 64 * len(times) / train_s},
        step_time_s={"p50": float(np.median(times))},
        hardware=HardwareInfo(slug=hardware, device_type="cpu", device_name="test cpu", device_count=1,
                              cpu_model="test cpu", cpu_cores=2),
        git=GitInfo(sha=git_sha, dirty=False), seed=seed, time_to_target_s=None, steps_to_target=None, eval_curve=[],
    )


def write_sides(root: Path, base: list[np.ndarray], head: list[np.ndarray], **kw) -> tuple[Path, Path]:
    """base/ and head/ result folders, run i of each side with seed i (a round of `trainbench ab`)."""
    head_kw = {k[5:]: v for k, v in kw.items() if k.startswith("head_")}
    base_kw = {k[5:]: v for k, v in kw.items() if k.startswith("base_")}
    common = {k: v for k, v in kw.items() if not k.startswith(("head_", "base_"))}
    for name, runs, extra in (("base", base, base_kw), ("head", head, head_kw)):
        for i, times in enumerate(runs):
            write_result(root / name, throughput_result(i, times, **{**common, "git_sha": name * 4, **extra}))
    return root / "base", root / "head"

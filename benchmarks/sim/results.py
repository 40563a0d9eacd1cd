"""The ONE Result factory (`make_result`) and the simulated runs built on it: site submissions (`site_result`,
`seeds`) and compare's log-normal runs (`simulated_result`, `noisy_runs`), written with the real writer."""

from __future__ import annotations

import hashlib
import math
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from suite.results.record import EvalPoint, GitInfo, HardwareInfo, PeakInfo, Result, write_result
from suite.results.stats import RunFigures


def make_result(**fields: Any) -> Any:
    """THE Result factory: a complete, valid result as the harness writes one (a reached tiny digits run);
    `fields` override any of it. Every builder below passes its own fields here."""
    base: dict[str, Any] = dict(
        run_id="0123abcd", started_at=datetime(2026, 12, 3, 7, 0, 0, tzinfo=UTC), workload="cv/digits_cnn",
        workload_version=1, spec_hash="f" * 16, backend="torch", config={"spec": {"name": "cv/digits_cnn"}},
        status="reached", time_to_target_s=4.2, train_s=4.0, eval_s=0.2, init_s=1.0, total_s=4.2, steps=120,
        samples=7680, steps_to_target=120,
        eval_curve=[EvalPoint(step=20 * i, samples=1280 * i, elapsed_s=0.7 * i, train_s=0.68 * i,
                              metrics={"accuracy": 0.1 * i}) for i in range(1, 7)],
        hardware=HardwareInfo(slug="cpu-test-2c", device_type="cpu", device_name="test cpu", device_count=1,
                              cpu_model="test cpu", cpu_cores=2),
        seed=0,
    )
    base.update(fields)
    return Result(**base)


# ---- site submissions ------------------------------------------------------------------------------------

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

DEVICES = {
    "nvidia-h200-x8": ("cuda", "NVIDIA H200", 8, 989e12),
    "nvidia-a100-x8": ("cuda", "NVIDIA A100-SXM4-80GB", 8, 312e12),
    "ascend-910b-x8": ("npu", "Ascend 910B", 8, 313e12),
    "cpu-amd-epyc-2c": ("cpu", "AMD EPYC 7B13", 1, None),
}


def spec_config(workload: str, *, target: float = 0.97, description: str = "", metric: str = "accuracy",
                precision: str = "fp32", extra: dict[str, Any] | None = None) -> dict[str, Any]:
    domain = workload.partition("/")[0]
    return {
        "spec": {
            "name": workload, "domain": domain, "version": 1,
            "description": description or f"{workload}: a small model trained to {metric} {target}",
            "model": {"arch": "cnn", "channels": [16, 32], "hidden": 64},
            "data": {"name": "digits", "batch_size": 64},
            "optimizer": {"name": "adamw", "lr": 0.003},
            "target": {"metric": metric, "value": target, "mode": "max", "provenance": "measured on this project"},
            "eval": {"every_steps": 20}, "budget": {"max_train_s": 60.0}, "tiers": ["smoke"],
        },
        "precision": precision, "compile": False, "threads": 1, **(extra or {}),
    }


def site_result(
    workload: str = "cv/digits_cnn",
    hardware: str = "nvidia-h200-x8",
    backend: str = "torch",
    *,
    seed: int = 0,
    tta_s: float | None = 10.0,
    status: str = "reached",
    started_at: datetime | None = None,
    sha: str = "a" * 40,
    evals: int = 6,
    target: float = 0.97,
    mfu: float | None = 0.41,
    spec_hash: str = "55c3975e2cfc18aa",
    precision: str = "fp32",
    description: str = "",
    **overrides: Any,
) -> Result:
    """A Result as the harness writes it. With status != reached the curve stays below the target."""
    device_type, device_name, count, peak = DEVICES.get(hardware, ("cuda", hardware, 1, None))
    total = tta_s if tta_s is not None else 60.0
    reached = status == "reached"
    curve = []
    for i in range(1, evals + 1):
        frac = i / evals
        acc = target * (0.55 + 0.45 * frac) if not reached else (target + 0.005 if i == evals else target * (0.5 + 0.45 * frac))
        curve.append(EvalPoint(step=20 * i, samples=1280 * i, elapsed_s=total * frac, train_s=total * frac * 0.9,
                               metrics={"accuracy": round(acc, 6), "loss": round(2.3 * (1 - frac) + 0.1, 6)}))
    steps = 20 * evals
    fields: dict[str, Any] = dict(
        run_id=hashlib.sha1(repr((workload, hardware, backend, seed, sha, started_at)).encode()).hexdigest()[:8],
        started_at=started_at or T0,
        workload=workload, workload_version=1, spec_hash=spec_hash, backend=backend,
        backend_version={"torch": "2.13.0", "deepspeed": "0.19.8", "megatron": "0.16.1", "npu": "2.13.0"}.get(backend),
        config=spec_config(workload, target=target, description=description, precision=precision),
        parallel={"dp": count, "tp": 1, "pp": 1},
        status=status, time_to_target_s=tta_s if reached else None,
        train_s=total * 0.9, eval_s=total * 0.1, init_s=3.2, total_s=total,
        steps=steps, samples=1280 * evals, steps_to_target=steps if reached else None,
        samples_to_target=1280 * evals if reached else None,
        final_metrics=dict(curve[-1].metrics) if curve else {},
        throughput={"samples_per_s": 1280 * evals / (total * 0.9), "data_wait_fraction": 0.02},
        step_time_s={"p50": total * 0.9 / steps, "p90": total / steps, "p99": total * 1.2 / steps,
                     "mean": total * 0.9 / steps},
        flops_per_sample=550656.0,
        mfu=mfu if peak else None, hfu=mfu if peak else None,
        peak=PeakInfo(device=device_name, dtype="bf16", flops_per_s=peak, source="vendor datasheet") if peak else None,
        memory={"device_peak_bytes": 12_000_000_000},
        energy_j=total * 700.0 * count if peak else None, energy_to_target_j=(tta_s or 0) * 700.0 * count if peak and reached else None,
        eval_curve=curve,
        hardware=HardwareInfo(slug=hardware, device_type=device_type, device_name=device_name, device_count=count,
                              cpu_model="AMD EPYC 7B13", cpu_cores=2, memory_bytes=24 << 30, hostname="bench-01"),
        software={"python": "3.11.2", "torch": "2.13.0"},
        git=GitInfo(sha=sha, dirty=False, branch="main"),
        seed=seed, world_size=count,
        error=None if status in ("reached", "budget") else f"run ended: {status}",
    )
    fields.update(overrides)
    return make_result(**fields)


def seeds(n: int, base: datetime | None = None, **kw: Any) -> list[Result]:
    """n seeds of one submission, a minute apart."""
    base = base or T0
    tta = kw.pop("tta_s", 10.0)
    jitter = kw.pop("jitter", 0.02)
    return [site_result(seed=s, started_at=base + timedelta(minutes=s),
                        tta_s=None if tta is None else tta * (1 + jitter * (s - (n - 1) / 2)), **kw) for s in range(n)]


# ---- compare's simulated runs -----------------------------------------------------------------------------

HW = "cpu-test-2c"
START = datetime(2026, 12, 1, tzinfo=UTC)


def simulated_result(
    seed: int, *, steps_to_target: int | None, time_per_step_s: float, status: str = "reached",
    workload: str = "cv/digits_cnn", backend: str = "torch", hardware: str = HW, spec_hash: str = "spec0001",
    noise_floor: float | None = None, eval_s: float = 0.5, batch: int = 64, peak_memory_bytes: int = 2**30,
    mfu: float | None = 0.3, energy_j: float | None = None, run_id: str | None = None,
) -> Result:
    reached = status == "reached" and steps_to_target is not None
    steps = steps_to_target if reached else 4000
    train_s = steps * time_per_step_s
    tta = train_s + eval_s if reached else None
    return make_result(
        run_id=run_id or f"r{seed:04d}{random.getrandbits(24):06x}",
        started_at=START + timedelta(minutes=seed),
        workload=workload, workload_version=1, spec_hash=spec_hash, backend=backend,
        config={"spec": {"name": workload, "compare": {"noise_floor": noise_floor}}},
        status=status, time_to_target_s=tta, train_s=train_s, eval_s=eval_s, init_s=1.0, total_s=train_s + eval_s,
        steps=steps, samples=steps * batch, steps_to_target=steps_to_target if reached else None, eval_curve=[],
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
        out.append(simulated_result(first_seed + i, steps_to_target=None if failed else s, time_per_step_s=t,
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

"""Builds real Result objects for the site tests and the site scale benchmark (written with write_result)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

from suite.compare import output as compare_output
from suite.results.record import EvalPoint, GitInfo, HardwareInfo, PeakInfo, Result

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


def make_result(
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
    return Result(**fields)


def seeds(n: int, base: datetime | None = None, **kw: Any) -> list[Result]:
    """n seeds of one submission, a minute apart."""
    base = base or T0
    tta = kw.pop("tta_s", 10.0)
    jitter = kw.pop("jitter", 0.02)
    return [make_result(seed=s, started_at=base + timedelta(minutes=s),
                        tta_s=None if tta is None else tta * (1 + jitter * (s - (n - 1) / 2)), **kw) for s in range(n)]


# ---- the constructed results folders the site tests share ----------------------------------------------

WL = "cv/digits_cnn"
NEW_SHA, OLD_SHA = "c0ffee" + "1" * 34, "0ld5ha" + "2" * 34
DAY = timedelta(days=1)

# (hardware, backend, TTA per seed; None = ran out of budget) -> expected olympic mean
LEADERBOARD = [
    ("nvidia-h200-x8", "deepspeed", [8.0, 9.0, 9.5, 10.0, 10.5]),  # 9.5
    ("nvidia-h200-x8", "torch", [10.0, 11.0, 12.0, 13.0, 100.0]),  # 12.0 (the 100 s outlier is dropped)
    ("nvidia-a100-x8", "torch", [20.0, 21.0, 22.0, None, 19.0]),  # 21.0: one miss is dropped as the slowest
    ("cpu-amd-epyc-2c", "torch", [290.0, 300.0, 310.0]),  # 300.0
    ("nvidia-a100-x8", "megatron", [15.0, None, 16.0, None, 14.0]),  # two misses: infinite, ranked last
]
EXPECTED_ORDER = [(h, b) for h, b, _ in LEADERBOARD[:4]] + [("nvidia-a100-x8", "megatron")]
EXPECTED_TTA = [9.5, 12.0, 21.0, 300.0, float("inf")]


def olympic_ttas() -> list[tuple[str, str, list[float | None]]]:
    return LEADERBOARD


def write_standard(root) -> dict[str, Any]:
    """The leaderboard fixture: five current submissions, one older faster one, a second workload."""
    from suite.results.record import write_result

    paths: dict[str, Any] = {"runs": []}
    now = T0 + 10 * DAY
    for i, (hw, backend, ttas) in enumerate(LEADERBOARD):
        for seed, tta in enumerate(ttas):
            r = make_result(WL, hw, backend, seed=seed, tta_s=tta, status="reached" if tta else "budget",
                            started_at=now + timedelta(minutes=10 * i + seed), sha=NEW_SHA, evals=6,
                            mfu=0.30 + 0.02 * i)
            paths["runs"].append(write_result(root, r))
    # an older submission of h200/torch that was faster: history only, never on the index
    for seed in range(3):
        write_result(root, make_result(WL, "nvidia-h200-x8", "torch", seed=seed, tta_s=5.0 + seed,
                                       started_at=T0 + timedelta(minutes=seed), sha=OLD_SHA, evals=4))
    # a second workload, in another domain, on one hardware only
    for seed in range(3):
        write_result(root, make_result("nlp/char_gru", "nvidia-h200-x8", "torch", seed=seed, tta_s=40.0 + seed,
                                       started_at=now + timedelta(hours=5, minutes=seed), sha=NEW_SHA, evals=9,
                                       description="Jane Austen's novels, a character GRU to val loss 1.7"))
    return paths


XSS = [
    '<script>window.__pwned=1;alert("xss-script")</script>',
    '"><img src=x onerror="window.__pwned=1;alert(\'xss-img\')">',
    '" onerror="window.__pwned=1" x="',
    "' onmouseover='window.__pwned=1' '",
    "javascript:window.__pwned=1;alert('xss-url')",
    '<svg onload="window.__pwned=1"><a href="javascript:alert(1)">x</a></svg>',
    "</textarea></title></style><script>window.__pwned=1</script>",
    "{{ 7*7 }}{% raw %}",
]


def write_hostile(root) -> list[Any]:
    """Results whose every free-text field carries a payload; each must render as text."""
    from suite.results.record import write_result

    written = []
    for i, p in enumerate(XSS):
        r = make_result(
            f"cv/{p}" if i % 2 else WL, hardware=f"hw-{p}", backend=f"torch{p}" if i % 3 == 0 else "torch",
            seed=i, tta_s=10.0 + i, started_at=T0 + timedelta(minutes=i), sha=f"sha{p}", evals=3,
            description=f"description {p}", backend_version=p, error=f"error {p}", warnings=[f"warning {p}"],
            mllog=p, run_id=f"id{p}", software={p: p, "torch": p}, memory={p: p},
            throughput={"samples_per_s": 100.0 + i, p: 1.0},
        )
        r.hardware.hostname = p
        r.hardware.device_name = p
        r.hardware.cpu_model = p
        r.git.branch = p
        r.config["spec"]["model"]["arch"] = p
        r.config[p] = {p: [p]}
        r.config["spec"]["target"]["metric"] = p if i == 0 else "accuracy"
        if i == 0:
            for pt in r.eval_curve:
                pt.metrics[p] = pt.metrics["accuracy"]
        r.final_metrics = {p: 0.5}
        written.append(write_result(root, r))
    return written


def write_compare_report(folder, hardware_tps: dict[str, float] | None = None):
    """A real `trainbench compare --json-out` report: 5 baseline and 5 candidate seeds per hardware of
    cv/digits_cnn on torch; the candidate's time per step is `tps` against a 0.01 s baseline."""
    import json
    import random

    from suite.compare import tta as cmp
    from support.compare_factory import noisy_runs, write_all

    rng = random.Random(7)
    tps = hardware_tps or {"nvidia-h200-x8": 0.012, "nvidia-a100-x8": 0.01, "cpu-amd-epyc-2c": 0.008}
    for i, (hw, t) in enumerate(sorted(tps.items())):
        write_all(folder / "base", noisy_runs(rng, 5, hardware=hw, first_seed=10 * i, cv_steps=0.01, cv_time=0.01))
        write_all(folder / "cand", noisy_runs(rng, 5, hardware=hw, first_seed=10 * i, time_per_step_s=t,
                                              cv_steps=0.01, cv_time=0.01))
    report = cmp.compare([folder / "base"], [folder / "cand"])
    path = folder / "compare.json"
    path.write_text(json.dumps(compare_output.to_json(report), indent=2))
    return path

"""Harness overhead: samples/s of `trainbench`'s timed loop vs a bare hand-written loop, same model and batches.

Both sides build the model, optimizer and batch stream from the same spec (cv/digits_cnn, whose 2 ms steps
make per-step overhead as visible as it gets), run the same number of optimizer steps with no evaluation,
and are timed with time.perf_counter. Runs alternate (bare, harness, bare, ...) so drift hits both; the
ratio of medians is reported. Usage:

    .venv/bin/python benchmarks/harness_overhead.py [--steps 600] [--repeats 7] [--threads 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from suite import devices, harness, registry
from suite.algorithms.optimizers import build_optimizer
from suite.algorithms.schedules import build_scheduler
from suite.specload import load_spec
from suite.workloads.contract import Context

SPEC = Path(__file__).resolve().parents[1] / "workloads" / "cv" / "digits_cnn.yaml"


def bare_loop(spec, steps: int, seed: int) -> float:
    """What a person would write by hand: no harness, no checks, no result. Returns samples/s."""
    torch.manual_seed(seed)
    device = devices.current()
    workload = registry.task_class(spec.task)(spec, Context(Path("."), seed, device.torch))
    model = workload.build_model().to(device.torch)
    opt = build_optimizer(spec.optimizer, model.parameters())
    sched = build_scheduler(spec.schedule, opt, spec.budget.max_steps)
    device.synchronize()
    t0 = time.perf_counter()
    batches = iter(workload.train_batches(0, 1))
    for _ in range(steps):
        x, y = next(batches)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
    device.synchronize()
    return steps * spec.data.batch_size / (time.perf_counter() - t0)


def harness_loop(spec, steps: int, seed: int, threads: int) -> float:
    req = harness.RunRequest(spec=spec, seed=seed, threads=threads, results_dir=None)
    result, _ = harness.run(req)
    assert result.steps == steps and result.status == "budget", (result.steps, result.status)
    return result.samples / result.train_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    overrides = {"budget.max_steps": args.steps, "eval.every_steps": 10**9, "target.value": 0.9999,
                 "budget.max_train_s": 3600}
    spec = load_spec(SPEC, overrides)
    bare_loop(spec, 50, 0)  # warm-up: first-touch allocations, lazy kernels
    bare, ours = [], []
    for i in range(args.repeats):
        bare.append(bare_loop(spec, args.steps, i))
        ours.append(harness_loop(spec, args.steps, i, args.threads))
    report = {
        "workload": spec.name, "steps": args.steps, "repeats": args.repeats, "threads": args.threads,
        "bare_samples_per_s_median": statistics.median(bare),
        "harness_samples_per_s_median": statistics.median(ours),
        "ratio_harness_over_bare": statistics.median(ours) / statistics.median(bare),
        "bare_all": bare, "harness_all": ours, "cpu": devices.cpu_model(), "cores": devices.cpu_cores(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"bare    {report['bare_samples_per_s_median']:10.0f} samples/s (median of {args.repeats})")
        print(f"harness {report['harness_samples_per_s_median']:10.0f} samples/s (median of {args.repeats})")
        print(f"ratio   {report['ratio_harness_over_bare']:.3f} (target >= 0.98)")


if __name__ == "__main__":
    main()

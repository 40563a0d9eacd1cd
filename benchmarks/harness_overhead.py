"""Harness overhead: throughput of `trainbench`'s timed loop vs a bare hand-written loop, timed from outside.

Both sides build the model, optimizer and batch stream from the same spec (cv/digits_cnn, whose ~2.6 ms
steps on one thread make per-step overhead as visible as a small GPU step would), and run the same number of
optimizer steps with no evaluation. Each side is timed from outside with time.perf_counter around the whole
call (the harness's `run`, the bare function), at N and at 2N steps: the marginal time per step,
(T(2N) - T(N)) / N, cancels init and teardown, so what is left is what each loop costs per step. The two
sides alternate (bare first on even repeats, harness first on odd ones) so that drift hits both; the figure
is the ratio of the medians of the marginal step times (bare / harness = harness throughput / bare), on the
wall clock (the figure) and on the process's CPU time (its check under load). The machine, its load
(os.getloadavg before and after) and the repeats are printed beside it. Usage:

    .venv/bin/python benchmarks/harness_overhead.py [--steps 600] [--repeats 7] [--threads 1] [--aa] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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


def bare_loop(spec, steps: int, seed: int) -> None:
    """What a person would write by hand: no harness, no checks, no result."""
    torch.manual_seed(seed)
    device = devices.current()
    workload = registry.task_class(spec.task)(spec, Context(Path("."), seed, device.torch))
    model = workload.build_model().to(device.torch)
    opt = build_optimizer(spec.optimizer, model.parameters())
    sched = build_scheduler(spec.schedule, opt, spec.budget.max_steps)
    batches = iter(workload.train_batches(0, 1))
    for _ in range(steps):
        x, y = next(batches)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
    device.synchronize()


def harness_loop(spec, steps: int, seed: int, threads: int) -> None:
    # measure_peak off: the GEMM benchmark is init (0.3-1 s, cancelled by the marginal), whose jitter is noise
    req = harness.RunRequest(spec=spec, seed=seed, threads=threads, results_dir=None, measure_peak=False)
    result, _ = harness.run(req)
    assert result.steps == steps and result.status == "budget", (result.steps, result.status, result.error)


def timed(fn, *args) -> tuple[float, float]:
    """(wall, this process's CPU time) of one whole call: with one torch thread the two agree on a quiet machine;
    under load the CPU time is the steadier of the two (it leaves out the time other processes held the core)."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


def marginal_step_s(fn, spec_n, spec_2n, steps: int, *args) -> tuple[float, float]:
    """(T(2N) - T(N)) / N, each T one whole call, for the wall clock and for the process's CPU time."""
    long, short = timed(fn, spec_2n, 2 * steps, *args), timed(fn, spec_n, steps, *args)
    return (long[0] - short[0]) / steps, (long[1] - short[1]) / steps


def _ms(values_ms: list[float]) -> str:
    return " ".join(f"{v:.3f}" for v in values_ms)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=600, help="N; each side also runs 2N")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--aa", action="store_true",
                    help="also time the bare loop a second time, alternating with the others: the A/A ratio of two "
                         "identical loops is this machine's noise floor for the figure (0.97 seen at load ~2)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    base = {"eval.every_steps": 10**9, "eval.at_start": False, "target.value": 0.9999, "budget.max_train_s": 3600}
    spec_n = load_spec(SPEC, {**base, "budget.max_steps": args.steps})
    spec_2n = load_spec(SPEC, {**base, "budget.max_steps": 2 * args.steps})
    load_before = os.getloadavg()
    bare_loop(spec_n, 50, 0)  # warm-up: first-touch allocations, lazy kernels, imports
    harness_loop(spec_n, args.steps, 0, args.threads)
    trials: dict[str, list[tuple[float, float]]] = {"bare": [], "harness": [], "bare_again": []}
    sides = ["bare", "harness", *(["bare_again"] if args.aa else [])]
    for i in range(args.repeats):
        for name in sides if i % 2 == 0 else sides[::-1]:
            if name != "harness":
                trials[name].append(marginal_step_s(bare_loop, spec_n, spec_2n, args.steps, i))
            else:
                trials[name].append(marginal_step_s(harness_loop, spec_n, spec_2n, args.steps, i, args.threads))
    report: dict = {
        "workload": spec_n.name, "steps_n": args.steps, "repeats": args.repeats, "threads": args.threads,
        "cpu_model": devices.cpu_model(), "cores": devices.cpu_cores(), "host": platform.node(),
        "torch": torch.__version__, "load_before": load_before, "load_after": os.getloadavg(),
    }
    for clock, k in (("wall", 0), ("cpu_time", 1)):
        bare = [t[k] for t in trials["bare"]]
        ours = [t[k] for t in trials["harness"]]
        report[clock] = {
            "bare_step_ms_median": statistics.median(bare) * 1e3,
            "harness_step_ms_median": statistics.median(ours) * 1e3,
            "ratio_harness_over_bare": statistics.median(bare) / statistics.median(ours),
            "bare_step_ms": [s * 1e3 for s in bare], "harness_step_ms": [s * 1e3 for s in ours],
        }
        if args.aa:
            again = [t[k] for t in trials["bare_again"]]
            report[clock]["aa_ratio_bare_again_over_bare"] = statistics.median(bare) / statistics.median(again)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"machine {report['cpu_model']} ({report['cores']} cores, {report['host']}), torch {report['torch']}, "
          f"{args.threads} thread(s)")
    print(f"load    {' '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{' '.join(f'{x:.2f}' for x in report['load_after'])} after (1/5/15 min)")
    print(f"method  marginal step time (T(2N)-T(N))/N timed from outside, N={args.steps}, {args.repeats} "
          "alternating repeats, medians")
    for clock in ("wall", "cpu_time"):
        r = report[clock]
        print(f"{clock:8} bare    {r['bare_step_ms_median']:.4f} ms/step  [{_ms(r['bare_step_ms'])}]")
        print(f"{clock:8} harness {r['harness_step_ms_median']:.4f} ms/step  [{_ms(r['harness_step_ms'])}]")
        print(f"{clock:8} ratio   {r['ratio_harness_over_bare']:.3f} harness throughput / bare (target >= 0.98)")
        if args.aa:
            print(f"{clock:8} A/A     {r['aa_ratio_bare_again_over_bare']:.3f} bare again / bare: the noise floor")


if __name__ == "__main__":
    main()

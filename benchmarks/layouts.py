"""Step time and peak memory per rank of each layout (`--parallel`) for one workload, on this machine.

    PYTHONPATH=. python benchmarks/layouts.py [--workload nlp/topics_gpt] [--steps 30] [--out FILE.json]

Each layout runs under torchrun (gloo on CPU, nccl on CUDA) through the same Backend contract the harness
drives: untimed setup, `--warmup` steps, then `--steps` timed steps (the median is reported, so a busy
neighbour inflates it less), and each rank's CPU time over the same steps (process time, its median: on a
shared CPU the part of the wall time this rank computed). Peak memory per rank: the device allocator's peak
on CUDA; on CPU the growth of the process's peak RSS from just before the backend's setup to the end (model,
optimizer, activations, communication buffers; the ~0.4 GB of imported libraries excluded). The Markdown table goes to stdout, for
docs/backends.md. Run it where nothing else runs for figures worth comparing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# (label, backend, processes, spec overrides)
LAYOUTS: list[tuple[str, str, int, dict[str, Any]]] = [
    ("1 process", "torch", 1, {}),
    ("ac=full", "torch", 1, {"parallel.ac": "full"}),
    ("micro-batches 4x8", "torch", 1, {"data.micro_batch_size": 8}),
    ("dp=2 (DDP)", "torch", 2, {}),
    ("fsdp=2", "torch", 2, {"parallel.fsdp": 2}),
    ("tp=2", "torch", 2, {"parallel.tp": 2}),  # with sequence parallelism and loss parallel (the default)
    ("tp=2 plain (no sp or loss parallel)", "torch", 2,
     {"parallel.tp": 2, "parallel.sp": False, "parallel.loss_parallel": False}),
    ("pp=2 gpipe", "torch", 2, {"parallel.pp": 2, "parallel.schedule": "gpipe"}),
    ("pp=2 1f1b", "torch", 2, {"parallel.pp": 2, "parallel.schedule": "1f1b"}),
    # torchtitan's 3-D layouts: TP / FSDP2 inside each pipeline stage (defaults: 1F1B, sp + loss parallel)
    ("pp=2 x tp=2", "torch", 4, {"parallel.pp": 2, "parallel.tp": 2}),
    ("pp=2 x fsdp=2", "torch", 4, {"parallel.pp": 2, "parallel.fsdp": 2}),
    ("megatron pp=2", "megatron", 2, {"parallel.pp": 2}),
    ("megatron tp=2", "megatron", 2, {"parallel.tp": 2}),
    ("megatron ac=full", "megatron", 1, {"parallel.ac": "full"}),
]


def worker(spec_name: str, backend: str, overrides: dict[str, Any], warmup: int, steps: int, out: str) -> None:
    """One rank: set up, train, measure; rank 0 writes every rank's figures."""
    import torch
    import torch.distributed as dist

    from suite import devices, distributed, registry
    from suite.backends.base import RunOptions
    from suite.data.locate import data_root
    from suite.harness import seed_everything
    from suite.specload import load_spec
    from suite.workloads.contract import Context

    info = distributed.from_env()
    device = devices.current(info.local_rank)
    devices.set_threads(int(os.environ.get("TRAINBENCH_BENCH_THREADS", "1")), info.local_world)
    distributed.init(info, device)
    spec = load_spec(registry.find_workload(spec_name), overrides)
    seed_everything(0)
    workload = registry.task_class(spec.task)(spec, Context(data_root=data_root(), seed=0, device=device.torch))
    be = registry.backend_class(backend)(device)
    rss_before = devices.peak_rss_bytes()
    device.reset_peak_memory()
    state = be.setup(workload, RunOptions(options=spec.backends.get(backend, {})))
    shard = be.data_shard()  # None: the process group's own rank and world (Backend's default)
    rank, world = shard if shard is not None else (info.rank, info.world)
    batches = iter(workload.train_batches(rank, world))
    times, cpu = [], []
    for i in range(warmup + steps):
        batch = next(batches)
        be.synchronize()
        t, c = time.perf_counter(), time.process_time()
        loss = be.train_step(state, batch).loss
        float(loss)
        be.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    mem = device.memory_stats()
    peak = mem.get("device_peak_allocated_bytes", devices.peak_rss_bytes() - rss_before)
    row = {"rank": info.rank, "step_s": statistics.median(times), "cpu_s": statistics.median(cpu), "peak_bytes": int(peak),
           "memory_source": mem["source"], "layout": be.parallel_layout()}
    be.close()
    rows = [row]
    if dist.is_initialized() and dist.get_world_size() > 1:
        rows = [None] * dist.get_world_size()  # type: ignore[list-item]
        dist.all_gather_object(rows, row)
    if info.is_main:
        Path(out).write_text(json.dumps(rows), encoding="utf-8")
    _ = torch  # imported first so that its thread settings apply before the suite's


def run_layout(workload: str, backend: str, nproc: int, overrides: dict[str, Any], warmup: int, steps: int,
               ) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        args = ["--worker", workload, backend, json.dumps(overrides), str(warmup), str(steps), str(out)]
        if nproc > 1:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                   __file__, *args]
        else:
            cmd = [sys.executable, __file__, *args]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"{backend} {overrides}: exit {p.returncode}\n{p.stderr[-3000:]}")
        return json.loads(out.read_text())


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| layout | backend | processes | micro-batches | step time (median) | CPU time per step per rank "
             "(median) | peak memory per rank |", "|---|---|---|---|---|---|---|"]
    for r in results:
        ranks = r["ranks"]
        step = max(x["step_s"] for x in ranks)  # a step ends when the slowest rank ends it
        mem = " / ".join(f"{x['peak_bytes'] / 2**20:.0f}" for x in sorted(ranks, key=lambda x: x["rank"]))
        cpu = " / ".join(f"{x['cpu_s'] * 1000:.0f}" for x in sorted(ranks, key=lambda x: x["rank"]))
        micro = ranks[0]["layout"].get("micro_batches", 1)
        lines.append(f"| {r['label']} | {r['backend']} | {r['nproc']} | {micro} | {step * 1000:.0f} ms | {cpu} ms "
                     f"| {mem} MiB |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, workload, backend, overrides, warmup, steps, out = sys.argv
        worker(workload, backend, json.loads(overrides), int(warmup), int(steps), out)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="nlp/topics_gpt")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--only", default=None, help="comma-separated labels to run")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process (1: every layout alike)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    os.environ["TRAINBENCH_BENCH_THREADS"] = str(a.threads)
    chosen = [x for x in LAYOUTS if a.only is None or x[0] in a.only.split(",")]
    results = []
    for label, backend, nproc, overrides in chosen:
        ranks = run_layout(a.workload, backend, nproc, overrides, a.warmup, a.steps)
        results.append({"label": label, "backend": backend, "nproc": nproc, "overrides": overrides, "ranks": ranks})
        print(f"{label}: {max(x['step_s'] for x in ranks) * 1000:.0f} ms", file=sys.stderr, flush=True)
        if a.out:  # after each layout: a long sweep interrupted keeps what it measured
            a.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(table(results))


if __name__ == "__main__":
    main()

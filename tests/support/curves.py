"""Loss curves of the first N steps under a backend: in-process (one rank) or as a torchrun main (many ranks).

Drives the Backend contract the way the harness does (seed, workload, setup, train_step over the workload's
own batches) but records every step's loss, which the harness does not keep, and the evaluation after the
last step. Used by tests/backends/test_parity.py (tests/ on PYTHONPATH).

    python -m torch.distributed.run --standalone --nproc_per_node 2 -m curves OUT.json \\
        SPEC STEPS backend:json-options | '{"backend": B, "options": {..}, "overrides": {"parallel.tp": 2}}' ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from suite import devices, distributed, registry
from suite.backends.base import RunOptions
from suite.data.locate import data_root
from suite.harness import seed_everything
from suite.specload import load_spec
from suite.workloads.contract import Context


def loss_curve(spec_path: Path | str, backend: str, steps: int, options: dict[str, Any] | None = None,
               seed: int = 0, precision: str = "fp32", overrides: dict[str, Any] | None = None,
               variant: str | None = None, compile: bool = False, permute: int | None = None,
               eval_at: tuple[int, ...] = (), permute_block: int | None = None) -> list[float]:
    """The loss of each of the first `steps` steps. Also kept (function attributes): `last_eval`, the evaluation
    after the last step; `last_evals`, step -> evaluation after that step, for each step in `eval_at` and the last;
    `last_layout`; in one process `last_trained` (workload, model). `permute` feeds each batch's samples in a
    seeded random order (the same sums, reduced in another order: tests/support/noise.py); `permute_block` keeps
    each sample within its block of that many (a micro-batch, whose MoE load-balancing loss is its own)."""
    info = distributed.from_env()
    device = devices.current(info.local_rank)
    distributed.init(info, device)
    spec = load_spec(Path(spec_path), overrides, variant)
    seed_everything(seed)
    workload = registry.task_class(spec.task)(spec, Context(data_root=data_root(), seed=seed, device=device.torch))
    be = registry.backend_class(backend)(device)
    try:
        state = be.setup(workload, RunOptions(precision=precision, compile=compile, options=options or {}))
        shard = be.data_shard()  # None: the process group's own rank and world (Backend's default)
        rank, world = shard if shard is not None else (info.rank, info.world)
        batches = iter(workload.train_batches(rank, world))
        if permute is not None:  # the same samples in another order: the same sums, reduced in another order
            batches = _permuted(batches, permute, permute_block)
        losses, evals = [], {}
        for step in range(1, steps + 1):
            loss = be.train_step(state, next(batches)).loss
            if info.world > 1:  # the mean over data-parallel ranks is the global-batch loss
                loss = loss.clone()
                torch.distributed.all_reduce(loss)
                loss /= info.world
            losses.append(float(loss))
            if step in eval_at or step == steps:
                # the workload's evaluation of the model as trained so far, as the harness runs it (under pp:
                # every rank's whole-model copy, gathered from the stages)
                model = be.eval_model(state)
                evals[step] = {k: float(v) for k, v in workload.evaluate(model).items()}
        layout = be.parallel_layout()
    finally:
        be.close()
    loss_curve.last_layout = layout  # type: ignore[attr-defined]
    loss_curve.last_eval = evals[steps]  # type: ignore[attr-defined]
    loss_curve.last_evals = evals  # type: ignore[attr-defined]
    if info.world == 1:  # the trained model and its workload, for a test that evaluates a changed copy (noise.py)
        loss_curve.last_trained = (workload, model)  # type: ignore[attr-defined]
    return losses


def _permuted(batches, seed: int, block: int | None = None):
    g = torch.Generator().manual_seed(seed)
    for batch in batches:
        if isinstance(batch, dict):  # a dict of per-sample tensors (the diffusion task's batches)
            n = len(next(iter(batch.values())))
        else:
            n = len(batch[0])
        size = block or n
        order = torch.cat([start + torch.randperm(size, generator=g) for start in range(0, n, size)])
        if isinstance(batch, dict):
            yield {k: t[order] for k, t in batch.items()}
            continue
        yield tuple(t[order] for t in batch)


def main(argv: list[str]) -> None:
    out, spec, steps, *runs = argv
    devices.set_threads(1)
    results = []
    for run in runs:
        if run.startswith("{"):  # {"backend": ..., "options": {...}, "overrides": {...}, "precision": ..., "spec": ...}
            job = json.loads(run)
        else:
            backend, _, opts = run.partition(":")
            job = {"backend": backend, "options": json.loads(opts or "{}")}
        losses = loss_curve(job.get("spec", spec), job["backend"], int(steps), job.get("options"),
                            precision=job.get("precision", "fp32"), overrides=job.get("overrides"),
                            compile=job.get("compile", False), eval_at=tuple(job.get("eval_at", ())))
        results.append({**job, "options": job.get("options") or {}, "losses": losses,
                        "layout": loss_curve.last_layout, "eval": loss_curve.last_eval,
                        "evals": {str(k): v for k, v in loss_curve.last_evals.items()}})  # type: ignore[attr-defined]
    if distributed.from_env().is_main:
        Path(out).write_text(json.dumps(results, indent=1), encoding="utf-8")
    if torch.distributed.is_initialized():  # an orderly end: no process group left to its C++ destructors at
        torch.distributed.barrier()  # exit (once seen under load: "terminate called without an active exception")
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])

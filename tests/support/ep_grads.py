"""One training step's gradients under an expert-parallel layout against one process's, parameter by parameter
(a torchrun main; tests/backends/test_layouts_ep.py).

Each layout runs the torch backend's real step (`train_step`) on the first global batch; the gradients it leaves are
gathered whole (FSDP2 shards over their mesh, expert shards over the ep group) and compared with the gradients of
the same weights in one process, where the global batch is cut into the same shards (ranks, then micro-batches),
each shard's loss (its load-balancing loss included) weighted 1/shards: the math a data-parallel step promises
(with `grad_clip`, both clipped by their global norm: under ep the experts' part is summed over the ep group).

    python -m torch.distributed.run --standalone --nproc_per_node 4 -m support.ep_grads OUT.json SPEC \\
        '{"parallel.ep": 2, "parallel.fsdp": 2}' ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from suite import devices, distributed, registry
from suite.backends.base import RunOptions
from suite.backends.parallel.expert import ExpertShard
from suite.data.locate import data_root
from suite.harness import seed_everything
from suite.models.common import moe
from suite.specload import load_spec
from suite.workloads.contract import Context


def _whole(grad: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return grad.full_tensor() if isinstance(grad, DTensor) else grad


def layout_grads(spec_path: str, overrides: dict[str, Any], device: Any) -> dict[str, Any]:
    """`overrides` are the spec's, except `grad_clip` (the torch backend's option; the reference clips alike)."""
    overrides = dict(overrides)
    clip = overrides.pop("grad_clip", None)
    spec = load_spec(Path(spec_path), overrides)
    seed_everything(0)
    workload = registry.task_class(spec.task)(spec, Context(data_root=data_root(), seed=0, device=device.torch))
    be = registry.backend_class("torch")(device)
    try:
        state = be.setup(workload, RunOptions(options={"grad_clip": clip} if clip else {}))
        rank, world = be.data_shard()
        be.train_step(state, next(iter(workload.train_batches(rank, world))))
        shards = {n for n, m in state.raw_model.named_modules() if isinstance(m, ExpertShard)}
        ep_group = be.mesh["ep"].get_group() if be.layout.ep > 1 else None
        got = {}
        for name, p in state.raw_model.named_parameters():
            g = _whole(p.grad)
            if name.rpartition(".")[0] in shards:  # this rank's experts: the ep group's in rank order
                parts = [torch.empty_like(g) for _ in range(dist.get_world_size(ep_group))]
                dist.all_gather(parts, g.contiguous(), group=ep_group)
                g = torch.cat(parts)
            got[name] = g
        micro, n_micro = be.micro, be.n_micro
    finally:
        be.close()
    # one process: the same weights (the same seed), the global batch cut into the same shards
    seed_everything(0)
    ref = workload.build_model().to(device.torch).train()
    x, y = next(iter(workload.train_batches(0, 1)))
    chunks = world * n_micro
    moe.set_aux_loss_grad_scale(1.0 / chunks)
    try:
        for i in range(chunks):
            part = slice(i * micro, (i + 1) * micro)
            (workload.loss(ref, (x[part], y[part])) / chunks).backward()
    finally:
        moe.set_aux_loss_grad_scale(1.0)
    norm = float(torch.nn.utils.clip_grad_norm_(ref.parameters(), clip or float("inf")))  # clips when clip is set
    worst = {}
    for name, p in ref.named_parameters():
        scale = float(p.grad.abs().max())
        worst[name] = float((got[name] - p.grad).abs().max()) / scale if scale else float(got[name].abs().max())
    return {"overrides": overrides, "grad_clip": clip, "norm": norm, "world": world, "micro_batches": n_micro, "worst": worst}


def main(argv: list[str]) -> None:
    out, spec, *layouts = argv
    devices.set_threads(1)
    info = distributed.from_env()
    device = devices.current(info.local_rank)
    distributed.init(info, device)
    rows = [layout_grads(spec, json.loads(overrides), device) for overrides in layouts]
    if info.is_main:
        Path(out).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])

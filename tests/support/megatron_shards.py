"""A torchrun main: the spec's model under the megatron backend in each given layout, on this launch's ranks.

For each job (a JSON object of spec overrides, e.g. {"parallel.tp": 2}): the backend's setup (which builds the
workload's model first, an `arch: hf_llama` checkpoint loaded from its folder, and copies it into this rank's
Megatron shard), the full-vocabulary logits of the given token ids (gathered over tp; broadcast from the last stage
under pp), then `steps` training steps' losses. Rank 0 writes {job: {"logits": [...], "losses": [...], "layout"}}
as a torch file. The spec's backends.megatron block is the backend's options; a "variant" key among the overrides
picks the spec's variant. Used by tests/backends/test_megatron_llama_shards.py and test_megatron_lora_samples.py
(tests/ on PYTHONPATH).

    python -m torch.distributed.run --standalone --nproc_per_node 2 -m support.megatron_shards \\
        OUT.pt SPEC IDS.pt STEPS BASE_OVERRIDES_JSON JOB_JSON ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from suite import devices, distributed, registry
from suite.backends.base import RunOptions
from suite.data.locate import data_root
from suite.harness import seed_everything
from suite.specload import load_spec
from suite.workloads.contract import Context


def run_layout(spec_path: str, overrides: dict, ids: torch.Tensor, steps: int) -> dict:
    info = distributed.from_env()
    device = devices.current(info.local_rank)
    distributed.init(info, device)
    variant = overrides.get("variant")  # the spec's variant, not a field
    spec = load_spec(Path(spec_path), {k: v for k, v in overrides.items() if k != "variant"}, variant)
    seed_everything(0)
    workload = registry.task_class(spec.task)(spec, Context(data_root=data_root(), seed=0, device=device.torch))
    backend = registry.backend_class("megatron")(device)
    try:
        state = backend.setup(workload, RunOptions(options=spec.backends.get("megatron", {})))
        model = backend.eval_model(state).eval()
        with torch.no_grad():
            logits = model(ids).clone()
        model.train()
        rank, world = backend.data_shard()
        batches = iter(workload.train_batches(rank, world))
        losses = []
        for _ in range(steps):
            loss = backend.train_step(state, next(batches)).loss.clone()
            torch.distributed.all_reduce(loss)  # tp/pp peers hold the same loss: the mean over ranks is it
            losses.append(float(loss) / info.world)
        layout = backend.parallel_layout()
    finally:
        backend.close()
    return {"logits": logits, "losses": losses, "layout": layout}


def main(argv: list[str]) -> None:
    out, spec, ids_path, steps, base, *jobs = argv
    devices.set_threads(1)
    ids = torch.load(ids_path)
    results = {job: run_layout(spec, {**json.loads(base), **json.loads(job)}, ids, int(steps)) for job in jobs}
    if distributed.from_env().is_main:
        torch.save(results, out)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])

"""What the torch backend's tensor-parallel plan did to the suite GPT, seen from inside (a torchrun main).

For each (sp, loss_parallel) asked for: the placements of the token embedding and the tied head, the local
shape of the first norm's input (a sequence shard under sp), the type and placement of the logits the
training forward returns (vocabulary-sharded under loss parallel), and the shape the evaluation model returns.
Used by tests/backends/test_layouts_tp.py (tests/ on PYTHONPATH).

    python -m torch.distributed.run --standalone --nproc_per_node 2 -m tp_plan OUT.json SPEC
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

CASES = [(True, True), (True, False), (False, True), (False, False)]


def placements(t: Any) -> list[str] | None:
    from torch.distributed.tensor import DTensor

    return [str(p) for p in t.placements] if isinstance(t, DTensor) else None


def local_shape(t: Any) -> list[int]:
    from torch.distributed.tensor import DTensor

    return list((t.to_local() if isinstance(t, DTensor) else t).shape)


def probe(spec_path: str, device: devices.Device, sp: bool, loss_parallel: bool) -> dict[str, Any]:
    spec = load_spec(Path(spec_path), {"parallel.tp": 2, "parallel.sp": sp, "parallel.loss_parallel": loss_parallel})
    seed_everything(0)
    workload = registry.task_class(spec.task)(spec, Context(data_root=data_root(), seed=0, device=device.torch))
    be = registry.backend_class("torch")(device)
    try:
        state = be.setup(workload, RunOptions())
        model = state.raw_model
        seen: dict[str, list[int]] = {}

        def record(_module: Any, args: tuple[Any, ...]) -> None:
            seen.setdefault("ln_1_input", local_shape(args[0]))

        handle = model.blocks[0].ln_1.register_forward_pre_hook(record)
        x, _ = next(iter(workload.train_batches(*be.data_shard())))
        with torch.no_grad():
            logits = model(x)
            eval_logits = be.eval_model(state)(x)
        handle.remove()
        return {"sp": sp, "loss_parallel": loss_parallel, "batch": list(x.shape),
                "wte": placements(model.wte.weight), "tied": model.lm_head.weight is model.wte.weight,
                "ln_1_weight": placements(model.blocks[0].ln_1.weight), "ln_1_input": seen["ln_1_input"],
                "logits": placements(logits), "logits_local": local_shape(logits),
                "eval_logits": [type(eval_logits).__name__, *eval_logits.shape],
                "layout": be.parallel_layout()}
    finally:
        be.close()


def main(argv: list[str]) -> None:
    out, spec = argv
    devices.set_threads(1)
    info = distributed.from_env()
    device = devices.current(info.local_rank)
    distributed.init(info, device)
    rows = [probe(spec, device, sp, lp) for sp, lp in CASES]
    if info.is_main:
        Path(out).write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])

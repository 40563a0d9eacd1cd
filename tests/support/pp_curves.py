"""torchrun main: loss curves of the pipelined Llama decoder (as tests/support/curves.py writes them), each job with
an optional injected fault, the negative controls of tests/backends/test_layouts_pp.py:

- "boundary": a stage boundary off by one layer: every stage after the first builds its layers from one layer
  later than the split says (one layer never trains; the evaluation copy maps each stage's layers one off);
- "loss_stage": the loss on the wrong stage: the last stage skips its own layers, so the workload's loss is taken
  on the previous stage's output (the head applied where the last-but-one stage ends);
- "aux_twice": each Mixture-of-Experts layer's load-balancing loss reaches the gradient twice (what an aux loss
  attached again by the recomputed forward of a checkpointed layer would do; suite/models/common/moe.py);
- "titan_boundary": torchtitan's pipeline_llm split with the first stage one layer short (that layer in no stage).
Not a fault: a job's `"fp32_experts": true` runs torchtitan's GroupedExperts in fp32 (`titan_fp32_experts`).

    python -m torch.distributed.run --standalone --nproc_per_node 2 -m support.pp_curves OUT.json SPEC STEPS \\
        '{"backend": "torch", "overrides": {"parallel.pp": 2}, "fault": "boundary"}' ...
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from suite import devices, distributed
from suite.backends.parallel import expert, pipeline_llama
from suite.models.common import moe
from support.curves import loss_curve


@contextmanager
def fault(name: str | None) -> Any:
    stage = pipeline_llama.LlamaStage
    init, forward = stage.__init__, stage.forward
    attach = moe._AttachAuxLoss.backward

    def late_start(self, llama, layers, first, last):  # type: ignore[no-untyped-def]
        init(self, llama, layers if first else range(layers.start + 1, layers.stop), first, last)

    def loss_early(self, x):  # type: ignore[no-untyped-def]
        if not self.last:
            return forward(self, x)
        return self.output(self.norm(x))  # this stage's layers skipped: the loss sees the stage before

    def aux_twice(ctx, grad):  # type: ignore[no-untyped-def]
        grad, aux_grad = attach(ctx, grad)
        return grad, 2 * aux_grad

    if name == "boundary":
        stage.__init__ = late_start  # type: ignore[method-assign]
    elif name == "loss_stage":
        stage.forward = loss_early  # type: ignore[method-assign]
    elif name == "aux_twice":
        moe._AttachAuxLoss.backward = staticmethod(aux_twice)  # type: ignore[method-assign]
    elif name == "titan_boundary":
        titan_split = _titan_split_one_off()
        titan_split.__enter__()
    elif name is not None:
        raise ValueError(f"unknown fault {name!r}")
    try:
        yield
    finally:
        if name == "titan_boundary":
            titan_split.__exit__(None, None, None)
        stage.__init__, stage.forward = init, forward  # type: ignore[method-assign]
        moe._AttachAuxLoss.backward = staticmethod(attach)  # type: ignore[method-assign]


@contextmanager
def _titan_split_one_off() -> Any:
    """torchtitan's pipeline_llm with its stage boundary one layer off: the first stage ends a layer early and the
    next starts where the split said, so that layer is in no stage (it never trains; the evaluation copy keeps its
    initial weights): the "boundary" fault above, on torchtitan's own split (`_generate_llm_fqn_per_model_part`)."""
    from torchtitan.distributed import pipeline_parallel

    split = pipeline_parallel._generate_llm_fqn_per_model_part

    def one_off(*args, **kwargs):  # type: ignore[no-untyped-def]
        parts = split(*args, **kwargs)
        return [parts[0][:-1], *parts[1:]]

    pipeline_parallel._generate_llm_fqn_per_model_part = one_off
    try:
        yield
    finally:
        pipeline_parallel._generate_llm_fqn_per_model_part = split


@contextmanager
def titan_fp32_experts(on: bool) -> Any:
    """torchtitan's GroupedExperts casts tokens and expert weights to bf16 always (torchtitan/models/common/moe.py):
    inside, its `.bfloat16()` casts are the identity, so the experts compute in fp32 and a layout's gap is the
    layout's, not bf16 rounding of differently grouped tokens. Only the casts in GroupedExperts.forward change."""
    if not on:
        yield
        return
    from torchtitan.models.common import moe as titan_moe

    forward = titan_moe.GroupedExperts.forward
    cast = torch.Tensor.bfloat16

    def fp32_forward(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        torch.Tensor.bfloat16 = lambda t, *a, **k: t  # type: ignore[method-assign]
        try:
            return forward(self, *args, **kwargs)
        finally:
            torch.Tensor.bfloat16 = cast  # type: ignore[method-assign]

    titan_moe.GroupedExperts.forward = fp32_forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        titan_moe.GroupedExperts.forward = forward  # type: ignore[method-assign]


@contextmanager
def _counted(cls: type) -> Any:
    """Counts the calls of `cls.forward` (a one-element list, filled while inside)."""
    forward, calls = cls.forward, [0]

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return forward(self, *args, **kwargs)

    cls.forward = counting  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        cls.forward = forward  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    out, spec, steps, *runs = argv
    devices.set_threads(1)
    results = []
    for run in runs:
        job = json.loads(run)
        with fault(job.get("fault")), titan_fp32_experts(job.get("fp32_experts", False)), \
                _counted(expert.ExpertShard) as calls:
            losses = loss_curve(job.get("spec", spec), job["backend"], int(steps), job.get("options"),
                                overrides=job.get("overrides"))
        results.append({**job, "losses": losses, "layout": loss_curve.last_layout,  # type: ignore[attr-defined]
                        "expert_shard_calls": calls[0],  # this rank's expert exchanges, recomputed ones included
                        "evals": {str(k): v for k, v in loss_curve.last_evals.items()}})  # type: ignore[attr-defined]
    if distributed.from_env().is_main:
        Path(out).write_text(json.dumps(results, indent=1), encoding="utf-8")
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])

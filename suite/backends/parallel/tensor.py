"""Tensor parallelism of the suite GPT with DTensor (`parallelize_module`), torchtitan's plan for its llama.

Per block: qkv and fc column-parallel (each rank computes n_head / tp heads and 1/tp of the MLP), proj and
fc_out row-parallel. The fused qkv weight is [Q; K; V]; a column shard of it would mix Q and K rows, so its
rows are first regrouped to [Q_0; K_0; V_0; Q_1; ...] (heads of rank r together), after which rank r's shard
is exactly [Q_r; K_r; V_r] (Megatron stores its qkv the same way).

Sequence parallelism (`sp`, torchtitan's default with tp): between the blocks' column/row pairs the residual
stream is sharded by sequence (Shard(1)), the norms run on their sequence shard (`SequenceParallel`), and the
row-parallel outputs are reduce-scattered instead of all-reduced; the column-parallel inputs all-gather the
sequence back (torchtitan declares that with `PrepareModuleInput` on its attention and feed-forward modules;
this GPT's block has no such submodules, so the same redistribution is the `input_layouts` of qkv and fc).
The embeddings then produce sequence shards: the token embedding is vocabulary-parallel (row-wise, its
output reduce-scattered to Shard(1)) and the position table is split by position (Shard(0)).

Loss parallel (`loss_parallel`): the LM head is column-parallel over the vocabulary and its logits stay a
vocabulary-sharded DTensor; the backend computes the workload's cross-entropy inside torch's
`loss_parallel()` (no rank ever holds all logits). Under sp or loss parallel the head's weight is sharded by
vocabulary rows, as is the token embedding's, so a tied embedding stays one (sharded) parameter.
Without either, the embeddings, norms and head stay replicated (every TP rank sees the same full inputs).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def tp_unsupported(model: nn.Module, tp: int) -> str | None:
    if hasattr(model, "tp_plan_unsupported"):  # a model that carries its own plan (the Flux DiT: suite/models/flux/model.py)
        return model.tp_plan_unsupported(tp)  # type: ignore[operator]
    blocks = getattr(model, "blocks", None)
    cfg = getattr(model, "cfg", None)
    if blocks is None or cfg is None or not all(hasattr(b, "qkv") for b in blocks):
        return "tensor parallelism (parallel.tp > 1) has a plan for the suite GPT (model.arch gpt) only"
    if cfg.n_head % tp or (cfg.mlp_ratio * cfg.d_model) % tp:
        return f"parallel.tp={tp} does not divide model.n_head={cfg.n_head} (and the MLP width)"
    return None


def qkv_rows_by_rank(t: torch.Tensor, tp: int, inverse: bool = False) -> torch.Tensor:
    """A fused qkv weight or bias, rows [Q; K; V] -> [Q_0; K_0; V_0; Q_1; ...] (or back, `inverse`)."""
    d = t.shape[0] // 3
    rest = tuple(t.shape[1:])
    groups = (tp, 3) if inverse else (3, tp)
    return t.reshape(*groups, d // tp, *rest).transpose(0, 1).reshape(t.shape)


@torch.no_grad()
def _group_qkv_by_rank(linear: nn.Linear, tp: int) -> None:
    linear.weight.copy_(qkv_rows_by_rank(linear.weight, tp))
    if linear.bias is not None:
        linear.bias.copy_(qkv_rows_by_rank(linear.bias, tp))


def apply_tp(model: nn.Module, tp_mesh: Any, sequence_parallel: bool = False, loss_parallel: bool = False) -> None:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    if hasattr(model, "apply_tp_plan"):
        return model.apply_tp_plan(tp_mesh, sequence_parallel, loss_parallel)  # type: ignore[operator]
    tp = tp_mesh.size()
    seq = Shard(1)  # the residual stream's layout between blocks: batch, SEQUENCE, hidden
    for block in model.blocks:  # type: ignore[union-attr]
        _group_qkv_by_rank(block.qkv, tp)
        if sequence_parallel:
            plan = {
                "ln_1": SequenceParallel(), "qkv": ColwiseParallel(input_layouts=seq),
                "proj": RowwiseParallel(output_layouts=seq),
                "ln_2": SequenceParallel(), "fc": ColwiseParallel(input_layouts=seq),
                "fc_out": RowwiseParallel(output_layouts=seq),
            }
        else:
            plan = {"qkv": ColwiseParallel(), "proj": RowwiseParallel(),
                    "fc": ColwiseParallel(), "fc_out": RowwiseParallel()}
        parallelize_module(block, tp_mesh, plan)
    if not (sequence_parallel or loss_parallel):
        return
    # a pipeline stage (pipeline.GPTStage) holds the embeddings (first) or the norm and head (last), or neither
    wte, wpe, ln_f, head = (getattr(model, n, None) for n in ("wte", "wpe", "ln_f", "lm_head"))
    tied = wte is not None and head is not None and head.weight is wte.weight
    head_in = seq if sequence_parallel else Replicate()
    top: dict[str, Any] = {}
    if wte is not None:
        top["wte"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=head_in)
    if head is not None:
        top["lm_head"] = ColwiseParallel(input_layouts=head_in,
                                         output_layouts=Shard(-1) if loss_parallel else Replicate(),
                                         use_local_output=not loss_parallel)
    if sequence_parallel and wpe is not None:
        top["wpe"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0))  # positions x hidden
    if sequence_parallel and ln_f is not None:
        top["ln_f"] = SequenceParallel()
    if top:
        parallelize_module(model, tp_mesh, top)
    if tied:  # each module distributed its own copy of the shared weight: both are Shard(0); keep one
        model.lm_head.weight = model.wte.weight  # type: ignore[union-attr]


def gathered(output: Any) -> Any:
    """A vocabulary-sharded DTensor of logits (loss parallel) as the full local tensor, for evaluation."""
    from torch.distributed.tensor import DTensor

    return output.full_tensor() if isinstance(output, DTensor) else output


class GatherLogits(nn.Module):
    """The model for evaluation under loss parallel: the same module, its logits gathered over the tp group
    (every TP rank evaluates, as every rank takes part in the blocks' collectives)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return gathered(self.model(*args, **kwargs))

"""Tensor parallelism of the suite GPT with DTensor (`parallelize_module`, Megatron's column/row plan).

Per block: qkv and fc column-parallel (each rank computes n_head / tp heads and 1/tp of the MLP), proj and
fc_out row-parallel (their outputs all-reduced). The fused qkv weight is [Q; K; V]; a column shard of it
would mix Q and K rows, so its rows are first regrouped to [Q_0; K_0; V_0; Q_1; ...] (heads of rank r
together), after which rank r's shard is exactly [Q_r; K_r; V_r] (Megatron stores its qkv the same way).
The embedding, the norms and the (tied) LM head stay replicated: every TP rank sees the same full inputs
there and computes the same gradients, so they stay identical without communication.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def tp_unsupported(model: nn.Module, tp: int) -> str | None:
    blocks = getattr(model, "blocks", None)
    cfg = getattr(model, "cfg", None)
    if blocks is None or cfg is None or not all(hasattr(b, "qkv") for b in blocks):
        return "tensor parallelism (parallel.tp > 1) has a plan for the suite GPT (model.arch gpt) only"
    if cfg.n_head % tp or (cfg.mlp_ratio * cfg.d_model) % tp:
        return f"parallel.tp={tp} does not divide model.n_head={cfg.n_head} (and the MLP width)"
    return None


@torch.no_grad()
def _group_qkv_by_rank(linear: nn.Linear, tp: int) -> None:
    d_out, d_in = linear.weight.shape
    d = d_out // 3
    linear.weight.copy_(linear.weight.view(3, tp, d // tp, d_in).transpose(0, 1).reshape(d_out, d_in))
    if linear.bias is not None:
        linear.bias.copy_(linear.bias.view(3, tp, d // tp).transpose(0, 1).reshape(d_out))


def apply_tp(model: nn.Module, tp_mesh: Any) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    tp = tp_mesh.size()
    for block in model.blocks:  # type: ignore[union-attr]
        _group_qkv_by_rank(block.qkv, tp)
        parallelize_module(block, tp_mesh, {
            "qkv": ColwiseParallel(), "proj": RowwiseParallel(),
            "fc": ColwiseParallel(), "fc_out": RowwiseParallel(),
        })

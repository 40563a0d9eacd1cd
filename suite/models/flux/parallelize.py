"""Tensor parallelism of the Flux DiT (suite/models/flux/model.py), beside the model it shards (torchtitan's habit).

Called by the torch backend's tp layout through `Flux.apply_tp_plan` (suite/backends/parallel/tensor.py).
"""

from __future__ import annotations

from typing import Any

import torch


@torch.no_grad()
def apply_tp(model: Any, tp_mesh: Any) -> None:  # a suite.models.flux.model.Flux
    """Megatron-style TP of every block (torch.distributed.tensor.parallel): qkv and MLP-in column-parallel
    (each rank n_heads / tp heads and 1/tp of the MLP), proj and MLP-out row-parallel; the per-sample
    modulation, the embedders and the output layer replicated. The fused weights are regrouped first so a
    contiguous shard is one rank's part: qkv rows [Q; K; V] -> [Q_0; K_0; V_0; Q_1; ...], the single block's
    linear1 rows [QKV; MLP] -> [QKV_0; MLP_0; ...] and linear2 columns [attn; MLP] -> [attn_0; MLP_0; ...].
    The q/k norms' weights stay replicated and their gradients are summed over the tp group (each rank
    normalises only its heads; without the sum the ranks' copies drift apart, seen as a 1e-5 loss gap in 20
    steps). No sequence parallelism (the joint text + image sequence is concatenated inside the blocks) and no
    loss parallelism (no vocabulary): both are recorded off."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    tp, h, r = tp_mesh.size(), model.cfg.hidden_size, model.cfg.mlp_hidden

    def regroup(t: torch.Tensor, sizes: list[int], dim: int) -> torch.Tensor:
        parts = torch.split(t, sizes, dim=dim)  # each part cut into tp pieces, then rank by rank
        pieces = [p.chunk(tp, dim=dim) for p in parts]
        return torch.cat([pc[i] for i in range(tp) for pc in pieces], dim=dim)

    for block in model.double_blocks:
        plan = {}
        for side in ("img", "txt"):
            qkv = getattr(block, f"{side}_attn").qkv
            qkv.weight.copy_(regroup(qkv.weight, [h, h, h], 0))
            if qkv.bias is not None:
                qkv.bias.copy_(regroup(qkv.bias, [h, h, h], 0))
            plan.update({f"{side}_attn.qkv": ColwiseParallel(), f"{side}_attn.proj": RowwiseParallel(),
                         f"{side}_mlp.0": ColwiseParallel(), f"{side}_mlp.2": RowwiseParallel()})
        parallelize_module(block, tp_mesh, plan)
    # the q/k RMSNorm weights act on each rank's own heads: their gradients are partial sums over the tp group
    group = tp_mesh.get_group()

    def summed(grad: torch.Tensor) -> torch.Tensor:
        torch.distributed.all_reduce(grad, group=group)
        return grad

    for norm in (m for m in model.modules() if hasattr(m, "query_norm")):  # QKNorm (no import: flux imports us)
        for p in norm.parameters():
            p.register_hook(summed)
    for single in model.single_blocks:
        single.linear1.weight.copy_(regroup(single.linear1.weight, [h, h, h, r], 0))
        single.linear1.bias.copy_(regroup(single.linear1.bias, [h, h, h, r], 0))
        single.linear2.weight.copy_(regroup(single.linear2.weight, [h, r], 1))
        parallelize_module(single, tp_mesh, {"linear1": ColwiseParallel(), "linear2": RowwiseParallel()})


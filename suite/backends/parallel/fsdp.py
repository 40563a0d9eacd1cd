"""FSDP2: `fully_shard` per block, then the root (torchtitan's order), with a `MixedPrecisionPolicy`.

Over a 1-D mesh (fsdp) this is ZeRO-3-style sharding; over a 2-D mesh (dp, fsdp) it is HSDP: replicated
across dp, sharded within fsdp. bf16 is the FSDP recipe: fp32 sharded master weights, bf16 gathered
compute weights, fp32 gradient reduction (docs/backends.md, "precision").
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def mp_policy(precision: str) -> Any:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision in ("bf16", "float8"):  # float8: bf16 outside the float8 matmuls, as torchtitan
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def apply_fsdp(model: nn.Module, mesh: Any, precision: str, reshard_after_forward: bool = True) -> nn.Module:
    """`reshard_after_forward=False` for a pipeline stage (torchtitan's default under pp): each micro-batch's
    forward would otherwise all-gather the stage's weights again."""
    from torch.distributed.fsdp import fully_shard

    policy = mp_policy(precision)
    blocks = getattr(model, "blocks", None) or getattr(model, "layers", None)  # the GPT's blocks, the Llama's layers
    for i, block in enumerate(blocks or []):
        # the last block's parameters are needed again at once by backward: keep them gathered
        reshard = reshard_after_forward and i < len(blocks) - 1
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def set_gradient_sync(model: nn.Module, sync: bool) -> None:
    """Micro-batches before the last accumulate locally (FSDP2's no_sync)."""
    setter = getattr(model, "set_requires_gradient_sync", None)
    if setter is not None:
        setter(sync)

"""The torch backend's FSDP2 sharding built for real, at full size, on meta tensors under a fake process group.

`torch.distributed` is initialised with the `fake` backend (torch.testing._internal.distributed.fake_pg.FakeStore:
every collective returns at once, nothing is sent) as rank 0 of N, a device mesh of the layout's shape is made, and
one layer of each kind the model has (dense, MoE), the embedding and the head are built on the meta device and
`fully_shard`-ed over the mesh's fsdp dimension as suite/backends/parallel/fsdp.py does. Their local shards (FSDP2
pads each parameter's first dimension to a multiple of the shard count) are the parameters rank 0 holds; the other
ranks of a stage hold the same up to that padding. Nothing is allocated: a 671B model's layers build in seconds.
"""

from __future__ import annotations

from typing import Any


def _local_numel(module: Any) -> int:
    return sum(int(p.to_local().numel()) if hasattr(p, "to_local") else int(p.numel()) for p in module.parameters())


def fsdp_local_params(cfg: Any, vocab: int, world: int, fsdp: int, precision: str) -> dict[str, int]:
    """{"dense_layer", "moe_layer", "embedding", "head"}: parameters on one rank of an fsdp group after FSDP2's
    `fully_shard` of that module (the kinds the model lacks are absent). Raises RuntimeError when a process group
    is already open in this process (the fake one cannot be made beside it)."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from suite.models.llama import model as llama

    if dist.is_initialized():
        raise RuntimeError("a process group is already open in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world // fsdp, fsdp), mesh_dim_names=("rest", "fsdp"))["fsdp"]
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if precision == "bf16" else MixedPrecisionPolicy()
        kinds: dict[str, Any] = {}
        with torch.device("meta"):
            if cfg.n_layer > cfg.dense_layers and cfg.moe is not None:
                kinds["moe_layer"] = llama.Block(cfg, cfg.n_layer - 1)
            if cfg.moe is None or cfg.dense_layers:
                kinds["dense_layer"] = llama.Block(cfg, 0)
            kinds["embedding"] = nn.Embedding(vocab, cfg.d_model)
            head = [llama.RMSNorm(cfg.d_model, cfg.norm_eps)]  # a tied head is the embedding's weight again
            kinds["head"] = nn.Sequential(*head, *([] if cfg.tie_embeddings else [nn.Linear(cfg.d_model, vocab,
                                                                                               bias=False)]))
        out = {}
        for name, module in kinds.items():
            fully_shard(module, mesh=mesh, mp_policy=policy)
            out[name] = _local_numel(module)
        return out
    finally:
        dist.destroy_process_group()

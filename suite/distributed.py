"""Process-group set-up from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT).

May import: `suite.devices`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported by the functions that need it: `from_env` is read by a driver that
    from suite.devices import Device  # has not imported torch yet (the fork server imports it meanwhile)


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def from_env() -> DistInfo:
    env = os.environ
    return DistInfo(
        rank=int(env.get("RANK", 0)),
        world=int(env.get("WORLD_SIZE", 1)),
        local_rank=int(env.get("LOCAL_RANK", 0)),
        local_world=int(env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", 1))),
    )


def init(info: DistInfo, device: Device, timeout_s: float = 300.0) -> None:
    """Join the process group once (several seeds in one process reuse it). A no-op for one process."""
    import torch.distributed as dist

    if info.world <= 1 or dist.is_initialized():
        return
    # a bounded timeout: when a peer dies, the survivors' collectives fail instead of hanging for 30 min
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if attempt > 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # a restarted job (--max-restarts): the agent's store still holds the failed attempt's keys, and a group
        # formed from them waits for peers that are gone (torch 2.13, --standalone); a prefix per attempt is fresh
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), info.world,
                              is_master=False, timeout=timedelta(seconds=timeout_s))
        dist.init_process_group(backend=device.dist_backend, store=dist.PrefixStore(f"trainbench/attempt-{attempt}",
                                store), rank=info.rank, world_size=info.world, timeout=timedelta(seconds=timeout_s))
        return
    dist.init_process_group(backend=device.dist_backend, timeout=timedelta(seconds=timeout_s))


def from_main(value: str) -> str:
    """Rank 0's `value` on every rank (a multi-node run's run id: each node's launcher drew its own)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return str(box[0])


def all_max(value: int) -> int:
    """The largest `value` over all ranks (used so every rank takes the same stop decision)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    # nccl/hccl reduce only device tensors; gloo only host ones
    backend = dist.get_backend()
    device = {"nccl": "cuda", "hccl": "npu"}.get(str(backend), "cpu")
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()

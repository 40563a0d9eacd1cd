"""The DeviceMesh of a layout: dimensions (pp, dp, fsdp, tp), tp innermost (neighbouring ranks), as torchtitan.
With expert parallelism an `ep` dimension sits between dp and fsdp: (pp, dp, ep, fsdp, tp)."""

from __future__ import annotations

from typing import Any

from suite.backends.layout import Layout

MESH_DIMS = ("pp", "dp", "fsdp", "tp")
EP_MESH_DIMS = ("pp", "dp", "ep", "fsdp", "tp")


def dims(layout: Layout) -> tuple[str, ...]:
    return EP_MESH_DIMS if layout.ep > 1 else MESH_DIMS


def build(layout: Layout, device_type: str) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    names = dims(layout)
    shape = tuple(getattr(layout, d) for d in names)
    return init_device_mesh(device_type, shape, mesh_dim_names=names)


def coordinate(mesh: Any, dim: str) -> int:
    return int(mesh.get_local_rank(dim))


def data_shard(mesh: Any, layout: Layout) -> tuple[int, int]:
    """(rank, world) of this process among the ranks that read different data: dp x ep x fsdp."""
    ep = coordinate(mesh, "ep") if layout.ep > 1 else 0
    return (coordinate(mesh, "dp") * layout.ep + ep) * layout.fsdp + coordinate(mesh, "fsdp"), layout.data_parallel

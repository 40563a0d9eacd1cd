"""The DeviceMesh of a layout: dimensions (pp, dp, fsdp, tp), tp innermost (neighbouring ranks), as torchtitan."""

from __future__ import annotations

from typing import Any

from suite.backends.layout import Layout

MESH_DIMS = ("pp", "dp", "fsdp", "tp")


def build(layout: Layout, device_type: str) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    shape = tuple(getattr(layout, d) for d in MESH_DIMS)
    return init_device_mesh(device_type, shape, mesh_dim_names=MESH_DIMS)


def coordinate(mesh: Any, dim: str) -> int:
    return int(mesh.get_local_rank(dim))


def data_shard(mesh: Any, layout: Layout) -> tuple[int, int]:
    """(rank, world) of this process among the ranks that read different data: dp x fsdp."""
    return coordinate(mesh, "dp") * layout.fsdp + coordinate(mesh, "fsdp"), layout.data_parallel

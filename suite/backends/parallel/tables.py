"""Recommenders' embedding tables sharded over the ranks (the spec's `parallel.tables`, `--parallel tables=auto`),
the dense layers data-parallel beside them: TorchRec's DistributedModelParallel shape on torch's own collectives
(suite/models/recsys/sharding.py holds the lookup, its gradient and the placements).

`parallel.tables` is `auto` (the planner below), one placement for every table (`row_wise`), or a plan per table
({item: row_wise, user: "table_wise:1", rating: column_wise}; a table left out goes table-wise to rank 0).
`parallel.table_memory_gib` is what one rank may hold of tables: a plan that puts more on a rank is refused.
Refusals found from the spec alone come from `spec_refusal` (before any process starts); those that need the
tables' sizes (a table the plan names that the model lacks, a table larger than a rank may hold) are `PlanRefused`,
raised during the untimed init: bad input, exit 2, nothing recorded (suite/execution/child.py).

DDP averages the dense gradients and ignores the shards, whose gradients the lookup's backward already forms
as the mean over ranks; gradient clipping takes the norm over the dense gradients once and every rank's shards.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from suite.data.base import DataMissing


class PlanRefused(DataMissing):
    """A sharding plan that cannot be placed on these tables: found during the untimed init, handled as bad input
    (exit 2, nothing recorded), naming the spec field to change."""


def auto_plan(tables: list[Any], world: int) -> dict[str, str]:
    """The planner of `tables: auto`, greedy as TorchRec's default proposer: largest table first, a table larger
    than an even share of all tables (total / world) goes row-wise over every rank, any other whole to the rank
    holding least so far."""
    sizes = {t.name: float(t.rows) * t.dim for t in tables}
    share = sum(sizes.values()) / world
    held = [0.0] * world
    plan: dict[str, str] = {}
    for t in sorted(tables, key=lambda t: (-sizes[t.name], t.name)):
        if sizes[t.name] > share and t.rows >= world:
            plan[t.name] = "row_wise"
            held = [h + sizes[t.name] / world for h in held]
        else:
            r = min(range(world), key=lambda k: (held[k], k))
            plan[t.name] = f"table_wise:{r}"
            held[r] += sizes[t.name]
    return plan


def resolve(spec: Any, tables: list[Any], world: int) -> dict[str, str]:
    """The whole plan ({every table: placement}) that the spec asks for on `world` ranks, checked against the tables'
    sizes; `PlanRefused` naming the field when it cannot be placed."""
    from suite.models.recsys.sharding import check_plan

    par = spec.parallel
    names = [t.name for t in tables]
    if par.tables == "auto":
        plan = auto_plan(tables, world)
    elif isinstance(par.tables, str):
        plan = {n: par.tables for n in names}
    else:
        unknown = [n for n in par.tables if n not in names]
        if unknown:
            raise PlanRefused(f"parallel.tables.{unknown[0]}: the model has no table {unknown[0]!r} (its tables: "
                              f"{', '.join(names)})")
        plan = {n: par.tables.get(n, "table_wise:0") for n in names}
    capacity = None if par.table_memory_gib is None else par.table_memory_gib * 2**30
    problems = check_plan(plan, tables, world, capacity_bytes=capacity)
    if problems:
        field = "parallel.table_memory_gib" if capacity is not None and any(
            "GiB" in p for p in problems) else "parallel.tables"
        raise PlanRefused(f"{field}: " + "; ".join(problems))
    return plan


def wanted(spec: Any, world: int) -> bool:
    """Whether this run shards its tables: then the model is built under `recsys.tables.deferred()` (no table
    allocated) and `apply` has each rank initialise only its shard."""
    return spec.parallel is not None and spec.parallel.tables is not None and world > 1


def build_model(workload: Any, world: int) -> nn.Module:
    """The workload's model; when its tables will be sharded, built without allocating them."""
    if not wanted(workload.spec, world):
        return workload.build_model()
    from suite.models.recsys.tables import deferred

    with deferred():
        return workload.build_model()


def apply(raw: nn.Module, spec: Any, rank: int, world: int, compile: bool = False) -> dict[str, Any]:
    """Shard `raw.tables` in place (every rank takes rank 0's tables' seed, so the shards are slices of one table:
    each rank initialises only its own rows and columns) and mark the shards for DDP and the optimizers. Returns
    what the result records."""
    from suite.models.recsys.sharding import column_wise_row_sum, shard_model
    from suite.models.recsys.tables import EmbeddingTables

    if compile:  # the lookup's collectives inside an autograd.Function: not traced here
        raise PlanRefused("--compile with parallel.tables is not implemented (the sharded lookup runs eager); "
                          "run with --no-compile or drop parallel.tables")
    full = getattr(raw, "tables", None)
    if not isinstance(full, EmbeddingTables):
        raise PlanRefused(f"parallel.tables: the model ({type(raw).__name__}) has no EmbeddingTables to shard")
    specs = list(full.specs.values())
    plan = resolve(spec, specs, world)
    if full.materialized:
        for name in full.specs:
            dist.broadcast(full.bag(name).weight.data, 0)
    else:
        seed = torch.tensor([full.init_seed], dtype=torch.int64)
        dist.broadcast(seed, 0)
        full.init_seed = int(seed.item())
    shard_model(raw, plan, rank, world)
    sharded = raw.tables
    row_sum = column_wise_row_sum(sharded)
    names = []
    for name, w in sharded.weights.items():
        w.embedding_table = True  # row-wise Adagrad's (suite/algorithms/dense_sparse.py)
        if sharded.shards[name].placement == "column_wise":
            w.row_sum = row_sum  # the accumulator of the whole row, summed over the column shards
        names.append(f"tables.weights.{name}")
    nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(raw, names)
    held = [0.0] * world
    for t in specs:
        kind, _, owner = plan[t.name].partition(":")
        size = float(t.rows) * t.dim * 4
        for r in range(world):
            held[r] += size / world if kind != "table_wise" else (size if r == int(owner or 0) else 0.0)
    return {"plan": plan, "requested": spec.parallel.tables, "table_bytes_per_rank": held}


def is_shard(p: torch.Tensor) -> bool:
    return bool(getattr(p, "sparse_table", False))


def clip_grad_norm(params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """torch's clip_grad_norm_ over the whole model: the replicated dense gradients once, every rank's shards
    summed over the ranks."""
    grads = [p.grad for p in params if p.grad is not None]
    dense = [g for p, g in ((p, p.grad) for p in params if p.grad is not None) if not is_shard(p)]
    shards = [p.grad for p in params if p.grad is not None and is_shard(p)]
    zero = torch.zeros((), dtype=torch.float32)
    dense_sq = torch.stack([torch.linalg.vector_norm(g, 2.0, dtype=torch.float32) ** 2 for g in dense]).sum() \
        if dense else zero
    shard_sq = torch.stack([torch.linalg.vector_norm(g, 2.0, dtype=torch.float32) ** 2 for g in shards]).sum() \
        if shards else zero.clone()
    dist.all_reduce(shard_sq)
    total = (dense_sq + shard_sq).sqrt()
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.to(g.dtype))
    return total

"""Embedding tables sharded over a process group, TorchRec's three placements on torch's own collectives:
table-wise (one rank holds the whole table), row-wise (rank r holds a contiguous block of rows) and column-wise
(rank r holds a slice of every row's columns). Dense layers stay replicated and data-parallel (`allreduce_dense_grads`).

A lookup gathers every rank's ids (all_gather, as TorchRec's input all-to-all delivers them to the shard owners),
each rank answers from its shard (zeros for rows it does not hold), and the answers are summed (row- and table-wise)
or concatenated (column-wise) back to each rank. Backward gathers the output gradients and each rank adds the
gradients of its own rows, divided by the world size: the mean over ranks of per-rank mean losses, as data-parallel
gradients are averaged. Only all_gather and all_reduce are used, so gloo runs it (it has no reduce_scatter).
TorchRec itself does not run beside torch 2.13 here (fbgemm-gpu-cpu 1.9.0 fails to load: docs/recommenders.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import nn

from suite.models.recsys.tables import EmbeddingTables, TableSpec, check_ids, init_rows

Placement = Literal["table_wise", "row_wise", "column_wise"]


class PlanError(ValueError):
    """A sharding plan that cannot be placed: names the table and what to change."""


@dataclass(frozen=True)
class Shard:
    table: TableSpec
    placement: Placement
    owner: int  # table-wise: the rank that holds it
    rows: tuple[int, int]  # this rank's [start, stop) rows (row-wise; whole table otherwise)
    cols: tuple[int, int]  # this rank's [start, stop) columns (column-wise; all otherwise)


def check_plan(plan: dict[str, str], tables: list[TableSpec], world: int,
               capacity_bytes: float | None = None, bytes_per_value: int = 4) -> list[str]:
    """Every problem with `plan` ({table: "table_wise[:rank]" | "row_wise" | "column_wise"}) for these tables on
    `world` ranks, each naming the table; capacity_bytes: what one rank may hold of tables (None: no limit)."""
    names = {t.name: t for t in tables}
    problems = [f"sharding plan names unknown table {n!r} (tables: {', '.join(names)})" for n in plan
                if n not in names]
    held = [0.0] * world
    for t in tables:
        kind, _, rank = plan.get(t.name, "table_wise:0").partition(":")
        size = float(t.rows) * t.dim * bytes_per_value
        if kind == "table_wise":
            r = int(rank or 0) if (rank or "0").isdigit() else -1
            if not 0 <= r < world:
                problems.append(f"table {t.name!r}: table_wise rank {rank!r} is not a rank of {world}")
                continue
            held[r] += size
        elif kind == "row_wise":
            if t.rows < world:
                problems.append(f"table {t.name!r}: {t.rows} rows cannot be split row-wise over {world} ranks")
            for r in range(world):
                held[r] += size / world
        elif kind == "column_wise":
            if t.dim % world:
                problems.append(f"table {t.name!r}: dim {t.dim} is not divisible by {world} ranks (column_wise)")
            for r in range(world):
                held[r] += size / world
        else:
            problems.append(f"table {t.name!r}: unknown placement {kind!r} (table_wise[:rank], row_wise, "
                            "column_wise)")
    if capacity_bytes is not None:
        for t in tables:
            kind = plan.get(t.name, "table_wise:0").split(":")[0]
            share = float(t.rows) * t.dim * bytes_per_value / (1 if kind == "table_wise" else world)
            if share > capacity_bytes:
                problems.append(f"table {t.name!r} is larger than the sharding can place: {share / 2**30:.2f} GiB "
                                f"on one rank ({kind}) > {capacity_bytes / 2**30:.2f} GiB per rank")
        if not problems and max(held) > capacity_bytes:
            worst = max(range(world), key=lambda r: held[r])
            problems.append(f"rank {worst} would hold {held[worst] / 2**30:.2f} GiB of tables > "
                            f"{capacity_bytes / 2**30:.2f} GiB per rank: spread the tables (row_wise)")
    return problems


def shard_of(table: TableSpec, entry: str, rank: int, world: int) -> Shard:
    kind, _, owner = entry.partition(":")
    if kind == "row_wise":
        per = -(-table.rows // world)
        lo = min(rank * per, table.rows)
        return Shard(table, "row_wise", -1, (lo, min(lo + per, table.rows)), (0, table.dim))
    if kind == "column_wise":
        per = table.dim // world
        return Shard(table, "column_wise", -1, (0, table.rows), (rank * per, (rank + 1) * per))
    return Shard(table, "table_wise", int(owner or 0), (0, table.rows), (0, table.dim))


def _gather_padded(x: torch.Tensor, world: int) -> tuple[torch.Tensor, list[int]]:
    """all_gather of tensors whose first dimension differs by rank: [world, max_n, ...] and each rank's n."""
    n = torch.tensor([x.shape[0]], dtype=torch.int64)
    sizes = [torch.zeros_like(n) for _ in range(world)]
    dist.all_gather(sizes, n)
    counts = [int(s) for s in sizes]
    pad = torch.zeros((max(counts), *x.shape[1:]), dtype=x.dtype)
    pad[: x.shape[0]] = x
    out = [torch.zeros_like(pad) for _ in range(world)]
    dist.all_gather(out, pad.contiguous())
    return torch.stack(out), counts


class _ShardedLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, ids: torch.Tensor, shard: Shard, rank: int, world: int,
                grad_scale: float) -> torch.Tensor:
        all_ids, counts = _gather_padded(ids, world)  # [world, max_n]
        lo, hi = shard.rows
        if shard.placement == "column_wise":
            part = weight[all_ids]  # [world, max_n, cols]: this rank's columns of every row
            pieces = [torch.zeros_like(part) for _ in range(world)]
            dist.all_gather(pieces, part.contiguous())
            out = torch.cat([p[rank, : counts[rank]] for p in pieces], dim=-1)
        else:
            mine = (all_ids >= lo) & (all_ids < hi) if shard.placement == "row_wise" else torch.full_like(
                all_ids, rank == shard.owner, dtype=torch.bool)
            part = torch.zeros((*all_ids.shape, shard.table.dim), dtype=weight.dtype)
            if mine.any():
                part[mine] = weight[all_ids[mine] - lo]
            dist.all_reduce(part)  # stands in for reduce_scatter, which gloo lacks
            out = part[rank, : counts[rank]]
        ctx.save_for_backward(all_ids)
        ctx.meta = (shard, rank, world, weight.shape, grad_scale)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor):  # type: ignore[override]
        (all_ids,) = ctx.saved_tensors
        shard, rank, world, shape, grad_scale = ctx.meta
        grads, counts = _gather_padded(grad_out.contiguous(), world)  # [world, max_n, dim]
        valid = torch.arange(all_ids.shape[1]).unsqueeze(0) < torch.tensor(counts).unsqueeze(1)
        grad_w = torch.zeros(shape, dtype=grad_out.dtype)
        lo, hi = shard.rows
        if shard.placement == "column_wise":
            c0, c1 = shard.cols
            grad_w.index_add_(0, all_ids[valid], grads[valid][:, c0:c1])
        else:
            mine = valid & ((all_ids >= lo) & (all_ids < hi) if shard.placement == "row_wise"
                            else torch.full_like(valid, rank == shard.owner))
            grad_w.index_add_(0, all_ids[mine] - lo, grads[mine])
        return grad_w * grad_scale, None, None, None, None, None


class ShardedEmbeddingTables(nn.Module):
    """`EmbeddingTables`' interface over this rank's shards. Built from an `EmbeddingTables` with the same seed on
    every rank: one built under `tables.deferred()` (no table allocated) has each rank initialise only its shard
    from the seed, by row blocks (`tables.init_rows`), the same values one process draws for those rows; one already
    materialised is sliced."""

    def __init__(self, full: EmbeddingTables, plan: dict[str, str], rank: int, world: int,
                 grad_scale: float | None = None):
        super().__init__()
        if problems := check_plan(plan, list(full.specs.values()), world):
            raise PlanError("; ".join(problems))
        self.specs, self.rank, self.world = full.specs, rank, world
        self.grad_scale = 1.0 / world if grad_scale is None else grad_scale
        self.shards = {n: shard_of(t, plan.get(n, "table_wise:0"), rank, world) for n, t in full.specs.items()}
        self.weights = nn.ParameterDict()
        for name, s in self.shards.items():
            if s.placement == "table_wise" and s.owner != rank:
                local = torch.zeros(0, s.table.dim)
            elif full.materialized:
                local = full.bag(name).weight.detach()[s.rows[0] : s.rows[1], s.cols[0] : s.cols[1]].clone()
            else:
                local = init_rows(s.table, full.init_seed, s.rows, s.cols, std=full.init_std)
            self.weights[name] = nn.Parameter(local)
            self.weights[name].sparse_table = True  # type: ignore[attr-defined]  # the sparse optimizer's

    def lookup(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        check_ids(self.specs[name], ids)
        flat = ids.reshape(-1)
        out = _ShardedLookup.apply(self.weights[name], flat, self.shards[name], self.rank, self.world,
                                   self.grad_scale)
        return out.reshape(*ids.shape, self.specs[name].dim)

    def pooled(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        rows = self.lookup(name, ids)
        mask = (ids > 0).to(rows.dtype).unsqueeze(-1)
        return (rows * mask).sum(1) / mask.sum(1).clamp_min(1.0)

    def gather_full(self, name: str) -> torch.Tensor:
        """The whole table assembled on every rank (tests, checkpoints)."""
        s, w = self.shards[name], self.weights[name].detach()
        if s.placement == "table_wise":
            full = w if self.rank == s.owner else torch.zeros(s.table.rows, s.table.dim)
            dist.broadcast(full.contiguous(), s.owner)
            return full
        parts, counts = _gather_padded(w, self.world)
        if s.placement == "row_wise":
            return torch.cat([parts[r, : counts[r]] for r in range(self.world)])
        return torch.cat(list(parts), dim=1)


def shard_model(model: nn.Module, plan: dict[str, str], rank: int, world: int, **kwargs: Any) -> nn.Module:
    """Replace `model.tables` by this rank's shards (in place); every other parameter stays replicated."""
    full = model.tables
    if not isinstance(full, EmbeddingTables):
        raise TypeError(f"model.tables is a {type(full).__name__}, not EmbeddingTables: shard a model once")
    model.tables = ShardedEmbeddingTables(full, plan, rank, world, **kwargs)
    return model


def allreduce_dense_grads(model: nn.Module, world: int) -> None:
    """Data-parallel dense layers: average every replicated parameter's gradient over the ranks."""
    for p in model.parameters():
        if p.grad is not None and not getattr(p, "sparse_table", False):
            dist.all_reduce(p.grad)
            p.grad /= world


def column_wise_row_sum(tables: ShardedEmbeddingTables):
    """RowWiseAdagrad's `row_sum` for sharded tables: a column-wise shard's squared-gradient sum and column count
    are summed over the ranks, so each row keeps one accumulator of the whole row, as on one process."""
    cw = {id(tables.weights[n]) for n, s in tables.shards.items() if s.placement == "column_wise"}

    def row_sum(p: torch.Tensor, sq: torch.Tensor, cols: int) -> tuple[torch.Tensor, int]:
        if id(p) not in cw:
            return sq, cols
        sq = sq.clone()
        dist.all_reduce(sq)
        return sq, cols * tables.world

    return row_sum

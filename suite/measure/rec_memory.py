"""Per-rank memory of a recommender under a sharding plan: embedding shards, their gradients and row-wise Adagrad
state, the replicated dense layers with Adam, and the step's transient buffers. Checked against torch's MemTracker
on CPU (tests/measure/test_rec_memory.py); docs/recommenders.md applies it to the full dlrmv4 on 8 x H100 and
8 x MI355X.

Two gradient conventions: `dense_table_grads=True` is this project's sharded tables on torch (a shard-sized gradient,
as autograd writes it); False is fbgemm's fused backward (TorchRec), which updates rows in place and keeps no table
gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.models.recsys.sharding import shard_of
from suite.models.recsys.tables import TableSpec


@dataclass(frozen=True)
class RankMemory:
    tables: float
    table_grads: float
    table_state: float  # row-wise Adagrad: one float per row held
    dense: float  # dense parameters + gradients + Adam's two moments
    transient: float  # the optimizer's squared-gradient buffer of the largest shard, lookup buffers
    activations: float

    @property
    def total(self) -> float:
        return (self.tables + self.table_grads + self.table_state + self.dense + self.transient
                + self.activations)


def rank_memory(tables: list[TableSpec], plan: dict[str, str], rank: int, world: int, *, dense_params: int,
                activation_bytes: float = 0.0, lookup_bytes: float = 0.0, bytes_per_value: int = 4,
                dense_table_grads: bool = True) -> RankMemory:
    """Bytes rank `rank` holds at the peak of a training step (after the first: optimizer state exists).
    lookup_bytes: the gathered ids and rows of one step's lookups on this rank (world x local batch x features x
    dim x bytes, as the all_gather holds them); activation_bytes: what the dense model keeps for backward."""
    held, rows, largest = 0.0, 0.0, 0.0
    for t in tables:
        s = shard_of(t, plan.get(t.name, "table_wise:0"), rank, world)
        if s.placement == "table_wise" and s.owner != rank:
            continue
        n_rows, n_cols = s.rows[1] - s.rows[0], s.cols[1] - s.cols[0]
        size = float(n_rows) * n_cols * bytes_per_value
        held += size
        rows += n_rows
        largest = max(largest, size)
    return RankMemory(
        tables=held,
        table_grads=held if dense_table_grads else 0.0,
        table_state=rows * bytes_per_value,
        dense=4.0 * dense_params * bytes_per_value,
        transient=(largest if dense_table_grads else 0.0) + lookup_bytes,
        activations=activation_bytes,
    )


def best_plan(tables: list[TableSpec], world: int) -> dict[str, str]:
    """Row-wise for every table: each rank holds 1/world of every table, the most even split (TorchRec's planner
    picks it for tables this large), so the per-rank peak is the smallest."""
    return {t.name: "row_wise" for t in tables}

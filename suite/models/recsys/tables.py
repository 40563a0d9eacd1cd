"""Embedding tables of a recommender: named tables (rows x dim), looked up per id (sequences) or pooled per bag
(multi-hot features), on torch's own `nn.EmbeddingBag`. A sharded collection (sharding.py) offers the same two
calls, so a model never knows where its rows live.

Initialisation by fixed-size row blocks: rows [k * BLOCK_ROWS, (k + 1) * BLOCK_ROWS) of a table are drawn from their
own generator, seeded from (the tables' seed, the table's name, k), so any row range or column range of a table can
be produced without the rest (`init_rows`). One process fills whole tables that way; a sharded run (sharding.py)
fills only each rank's shard and is bit-for-bit the same table. The tables' seed is one draw from torch's global
generator when the model is built (so `torch.manual_seed` still decides everything, and the dense layers built after
the tables see the same generator state whether the tables are materialised or not). Under `deferred()` the tables
are not allocated at all: only their specs and seed are kept until a sharded collection takes their place.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class TableSpec:
    name: str
    rows: int
    dim: int


class IdOutOfRange(ValueError):
    """An id at or past a table's rows (or negative): named, instead of an index error deep in a kernel."""


def check_ids(table: TableSpec, ids: torch.Tensor) -> None:
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= table.rows):
        raise IdOutOfRange(f"table {table.name!r}: id {int(ids.max()) if int(ids.max()) >= table.rows else int(ids.min())}"
                           f" out of range [0, {table.rows})")


BLOCK_ROWS = 1024  # rows per init block: part of what a seed means, never change it without a spec version bump
_DEFERRED = [False]


def block_seed(seed: int, table: str, block: int) -> int:
    """The generator seed of one row block: a stable hash of (seed, table name, block index), 63 bits."""
    digest = hashlib.blake2b(f"{seed}/{table}/{block}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def init_rows(table: TableSpec, seed: int, rows: tuple[int, int], cols: tuple[int, int] | None = None,
              std: float = 0.05) -> torch.Tensor:
    """Rows [rows) and columns [cols) of `table` as initialised from `seed`: N(0, std^2), drawn block by block
    (BLOCK_ROWS x dim each, its own generator), holding at most one block beyond the result."""
    lo, hi = rows
    c0, c1 = cols if cols is not None else (0, table.dim)
    out = torch.empty(max(hi - lo, 0), c1 - c0)
    gen = torch.Generator()
    for k in range(lo // BLOCK_ROWS, -(-hi // BLOCK_ROWS)):
        b0, b1 = k * BLOCK_ROWS, min((k + 1) * BLOCK_ROWS, table.rows)
        gen.manual_seed(block_seed(seed, table.name, k))
        block = torch.randn(b1 - b0, table.dim, generator=gen) * std
        s0, s1 = max(lo, b0), min(hi, b1)
        out[s0 - lo : s1 - lo] = block[s0 - b0 : s1 - b0, c0:c1]
    return out


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Models built inside allocate no table: each EmbeddingTables keeps its specs and seed, and a sharded collection
    (sharding.ShardedEmbeddingTables) later initialises only this rank's shard."""
    _DEFERRED[0], before = True, _DEFERRED[0]
    try:
        yield
    finally:
        _DEFERRED[0] = before


class EmbeddingTables(nn.Module):
    """All tables of a model on one device. Row 0 of every table is the padding row of the readers (ids start at 1)
    but is trained like any other: the models mask padded positions themselves."""

    def __init__(self, specs: list[TableSpec], init_std: float = 0.05, seed: int | None = None):
        super().__init__()
        self.specs = {s.name: s for s in specs}
        self.init_std = init_std
        self.init_seed = int(torch.randint(0, 2**62, (1,)).item()) if seed is None else seed
        self.materialized = not _DEFERRED[0]
        bags = {}
        if self.materialized:  # _weight given: EmbeddingBag's own reset_parameters (a global-generator draw) skipped
            bags = {s.name: nn.EmbeddingBag(s.rows, s.dim, mode="sum",
                                            _weight=init_rows(s, self.init_seed, (0, s.rows), std=init_std))
                    for s in specs}
        self.bags = nn.ModuleDict(bags)
        for name in bags:
            # what a dense/sparse optimizer pair updates row-wise (suite/algorithms/dense_sparse.py)
            self.bag(name).weight.embedding_table = True  # type: ignore[attr-defined]

    def bag(self, name: str) -> nn.EmbeddingBag:
        if not self.materialized:
            raise RuntimeError(f"table {name!r} was built under tables.deferred(): shard it (sharding.shard_model) "
                               "before a lookup")
        bag = self.bags[name]
        assert isinstance(bag, nn.EmbeddingBag)
        return bag

    def lookup(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """ids [...] -> rows [..., dim]."""
        check_ids(self.specs[name], ids)
        return F.embedding(ids, self.bag(name).weight)

    def pooled(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, k] (0 = absent) -> mean of the present rows [B, dim] (a zero vector when none is present)."""
        check_ids(self.specs[name], ids)
        mask = (ids > 0).to(self.bag(name).weight.dtype)
        summed = self.bag(name)(ids, per_sample_weights=mask)
        return summed / mask.sum(1, keepdim=True).clamp_min(1.0)

    def parameter_bytes(self) -> int:
        return sum(self.bag(n).weight.numel() * self.bag(n).weight.element_size() for n in self.bags)

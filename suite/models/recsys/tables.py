"""Embedding tables of a recommender: named tables (rows x dim), looked up per id (sequences) or pooled per bag
(multi-hot features), on torch's own `nn.EmbeddingBag`. A sharded collection (sharding.py) offers the same two
calls, so a model never knows where its rows live.
"""

from __future__ import annotations

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


class EmbeddingTables(nn.Module):
    """All tables of a model on one device. Row 0 of every table is the padding row of the readers (ids start at 1)
    but is trained like any other: the models mask padded positions themselves."""

    def __init__(self, specs: list[TableSpec], init_std: float = 0.05):
        super().__init__()
        self.specs = {s.name: s for s in specs}
        self.bags = nn.ModuleDict({s.name: nn.EmbeddingBag(s.rows, s.dim, mode="sum") for s in specs})
        for name in self.specs:
            nn.init.normal_(self.bag(name).weight, std=init_std)
            # what a dense/sparse optimizer pair updates row-wise (suite/algorithms/dense_sparse.py)
            self.bag(name).weight.embedding_table = True  # type: ignore[attr-defined]

    def bag(self, name: str) -> nn.EmbeddingBag:
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
        return sum(self.bag(n).weight.numel() * self.bag(n).weight.element_size() for n in self.specs)

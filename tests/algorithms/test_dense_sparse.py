"""dlrmv4's optimizer pair in one optimizer: over 5 steps of an HSTU-shaped model (tables + dense layers) it moves
the dense parameters as torch.optim.Adam and the tables as the suite's RowWiseAdagrad, each run on its own copy;
negative control: Adam on the tables too moves them differently."""

from __future__ import annotations

import torch
from torch import nn

from suite.algorithms.dense_sparse import AdamRowWiseAdagrad, is_table
from suite.algorithms.rowwise_adagrad import RowWiseAdagrad
from suite.models.recsys.tables import EmbeddingTables, TableSpec


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = EmbeddingTables([TableSpec("item", 30, 8), TableSpec("user", 10, 8)])
        self.mlp = nn.Sequential(nn.Linear(16, 8), nn.LayerNorm(8), nn.SiLU(), nn.Linear(8, 1))

    def forward(self, items, users):
        x = torch.cat([self.tables.lookup("item", items), self.tables.lookup("user", users)], dim=1)
        return self.mlp(x).squeeze(-1)


def _seeded() -> Tiny:
    torch.manual_seed(0)
    return Tiny()


def _train(model, optimizers, steps=5):
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        items, users = torch.randint(0, 30, (16,), generator=gen), torch.randint(0, 10, (16,), generator=gen)
        y = torch.rand(16, generator=gen)
        for opt in optimizers:
            opt.zero_grad()
        nn.functional.binary_cross_entropy_with_logits(model(items, users), y).backward()
        for opt in optimizers:
            opt.step()


def _close(a, b):
    return all(torch.allclose(x, y, rtol=1e-5, atol=1e-7) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def test_dense_moves_as_adam_and_tables_as_rowwise_adagrad():
    model, ref, control = (_seeded() for _ in range(3))  # deepcopy would drop the tables' mark (a new Parameter)
    assert _close(model, ref)
    assert sum(is_table(p) for p in model.parameters()) == 2 and all(is_table(p) for p in ref.tables.parameters())
    kw = {"lr": 0.01, "betas": (0.95, 0.999), "eps": 1e-8}
    _train(model, [AdamRowWiseAdagrad(model.parameters(), **kw)])
    _train(ref, [torch.optim.Adam(ref.mlp.parameters(), **kw), RowWiseAdagrad(ref.tables.parameters(), lr=0.01)])
    assert _close(model, ref)
    _train(control, [torch.optim.Adam(control.parameters(), **kw)])
    assert not _close(model.tables, control.tables)  # (the dense layers then differ too: their inputs do)


def test_no_marked_table_is_refused():
    import pytest

    with pytest.raises(ValueError, match="no embedding table"):
        AdamRowWiseAdagrad(nn.Linear(4, 2).parameters(), lr=0.01)

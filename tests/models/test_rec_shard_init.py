"""Each rank allocates and initialises only its shard of the embedding tables (suite/models/recsys/tables.py's row-block
init, sharding.py), and the shards are bit-for-bit the one-process tables.

Allocation is counted with a TorchDispatchMode that sees every tensor any op creates while the model is built and
sharded: the table bytes a rank holds are its share (1/N row-wise and column-wise, all or nothing table-wise), and no
op ever creates a tensor larger than that share (a whole table would show as one tensor of the table's size: the
negative control, the one-process build, does). The one-process run and the N "ranks" are built in this one process
(the shards' construction uses no collective); the full dlrmv4's 559 GiB of tables are built deferred (no table
allocated) and each rank's share is computed from the same plan."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from suite.data.rec.yambda_cross import CROSS_SPECS
from suite.models.recsys import hstu
from suite.models.recsys.sharding import shard_model, shard_of
from suite.models.recsys.tables import BLOCK_ROWS, EmbeddingTables, TableSpec, deferred, init_rows

ROWS, DIM, WORLD = 40_000, 16, 4  # 2.56 MB of table: 640 KB a rank, a 64 KB init block
META = {"cardinality": {"user": 300, "item": ROWS, "rating": 7}, "max_history": 6}
CFG = hstu.Config(preset="tiny", embedding_dim=DIM)


class Allocations(TorchDispatchMode):
    """The largest tensor (bytes) any op outputs while active."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self.largest = max(self.largest, t.numel() * t.element_size())
        return out


def _one_process() -> tuple[torch.nn.Module, int]:
    torch.manual_seed(3)
    with Allocations() as seen:
        model = hstu.build(CFG, META)
    return model, seen.largest


def _rank(plan: dict[str, str], rank: int) -> tuple[torch.nn.Module, int]:
    torch.manual_seed(3)  # every rank is seeded alike, as the harness seeds them
    with Allocations() as seen:
        with deferred():
            model = hstu.build(CFG, META)
        shard_model(model, plan, rank, WORLD)
    return model, seen.largest


@pytest.mark.parametrize("placement", ["row_wise", "column_wise"])
def test_a_rank_allocates_its_share_and_the_shards_are_the_one_process_table(placement: str) -> None:
    full, full_largest = _one_process()
    table_bytes = ROWS * DIM * 4
    assert full_largest >= table_bytes  # negative control: one process creates the whole table
    plan = {"item": placement, "user": "table_wise:1"}
    pieces = []
    for rank in range(WORLD):
        model, largest = _rank(plan, rank)
        item = model.tables.weights["item"].detach()
        held = sum(w.numel() * w.element_size() for w in model.tables.weights.values())
        assert item.numel() * 4 == table_bytes // WORLD
        assert held <= table_bytes // WORLD + 300 * DIM * 4 + 7 * DIM * 4  # its share, the small tables or none
        assert largest <= table_bytes // WORLD, (rank, largest)  # never the whole table, not even for a moment
        pieces.append(item)
        dense = {n: p for n, p in model.named_parameters() if not n.startswith("tables.")}
        for n, p in full.named_parameters():
            if not n.startswith("tables."):
                assert torch.equal(p, dense[n]), n  # the dense layers too: the same generator state after the tables
        for name, owner in (("user", 1),):
            w = model.tables.weights[name].detach()
            assert torch.equal(w, full.tables.bag(name).weight) if rank == owner else w.numel() == 0
    assembled = torch.cat(pieces, dim=0 if placement == "row_wise" else 1)
    assert torch.equal(assembled, full.tables.bag("item").weight.detach())


def test_any_row_or_column_range_is_drawn_without_the_rest() -> None:
    spec = TableSpec("item", 5 * BLOCK_ROWS + 17, 12)
    whole = EmbeddingTables([spec], seed=11).bag("item").weight.detach()
    for rows, cols in (((0, spec.rows), (0, 12)), ((BLOCK_ROWS - 3, 3 * BLOCK_ROWS + 5), (4, 8)),
                       ((5 * BLOCK_ROWS, spec.rows), (0, 12)), ((7, 8), (11, 12))):
        assert torch.equal(init_rows(spec, 11, rows, cols), whole[rows[0] : rows[1], cols[0] : cols[1]])
    assert not torch.equal(init_rows(spec, 12, (0, 9)), whole[:9])  # another seed, other rows
    other = TableSpec("user", spec.rows, 12)  # another table of the same shape draws other rows
    assert not torch.equal(init_rows(other, 11, (0, 9)), whole[:9])
    assert abs(float(whole.std()) - 0.05) < 0.002


def test_the_full_dlrmv4_tables_are_never_allocated_when_sharded() -> None:
    """The reference's eleven 512-dim yambda-5b tables (mlcommons/training recommendation_v4 dlrm_v3/configs.py
    get_embedding_table_config("yambda-5b"), commit 0f1fcf05b6fa7c3d69f4bb45df1d2887ec76a683; 558.9 GiB fp32), built
    deferred with the full HSTU, as the reference builds its EmbeddingCollection on the meta device (dlrm_hstu.py):
    only the dense layers are allocated, and each of 8 row-wise ranks would hold 1/8 of every table."""
    card = {"user": 1_000_000, "item": 9_390_000, "artist": 1_290_000, "album": 3_370_000, "rating": 7,
            **{name: rows for name, _keys, rows, _salt in CROSS_SPECS}}
    meta = {"cardinality": card, "max_history": 8, "item_side": ("artist", "album"),
            "contextual": tuple(name for name, *_ in CROSS_SPECS)}
    with deferred():  # a broken deferral must fail here, not try to allocate 559 GiB below
        assert not EmbeddingTables([TableSpec("probe", 10, 4)]).materialized
    with Allocations() as seen, deferred():
        model = hstu.build(hstu.Config(preset="full"), meta)
    specs = list(model.tables.specs.values())
    total = sum(t.rows * t.dim * 4 for t in specs)
    assert total > 550 * 2**30
    assert seen.largest < 64 * 2**20 and sum(p.numel() for p in model.parameters()) < 20e6  # dense only
    per_rank = [sum((s.rows[1] - s.rows[0]) * t.dim * 4 for t in specs
                    for s in [shard_of(t, "row_wise", r, 8)]) for r in range(8)]
    assert sum(per_rank) == total and max(per_rank) < total / 8 * 1.001


def test_the_backend_builds_deferred_only_when_the_run_shards_its_tables() -> None:
    """suite/backends/parallel/tables.py build_model: a run with parallel.tables on more than one rank builds the
    model without its tables (the torch backend then shards it), any other run materialises them."""
    from types import SimpleNamespace

    from suite.backends.parallel import tables as parallel_tables
    from suite.spec.schema import ParallelSpec

    def workload(tables: str | None) -> SimpleNamespace:
        par = None if tables is None else ParallelSpec(tables=tables)
        return SimpleNamespace(spec=SimpleNamespace(parallel=par), build_model=lambda: hstu.build(CFG, META))

    assert not parallel_tables.build_model(workload("row_wise"), 2).tables.materialized
    assert not parallel_tables.build_model(workload("auto"), 4).tables.bags  # nothing allocated
    assert parallel_tables.build_model(workload("row_wise"), 1).tables.materialized
    assert parallel_tables.build_model(workload(None), 2).tables.materialized

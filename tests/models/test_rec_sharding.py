"""Sharded embedding tables (table-wise, row-wise, column-wise over gloo) with data-parallel dense layers, dense Adam
beside row-wise Adagrad, against one process over 20 steps: the loss curve and the final tables agree within a
tolerance measured first on this machine (the one-process run with each global batch's samples reordered, and
the global batch as two accumulated halves: K = 4 correct runs beside the reference, bounded as tests/support/noise.py
bounds a layout, from their sample deviation with the t quantile), and a known sharding bug (column-wise shards
placed in reverse rank order) lies far outside it. Plans naming an unknown table or a table too large are refused naming it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from support.noise import REORDERINGS, SAME_MATH, bound

from suite.algorithms.rowwise_adagrad import RowWiseAdagrad
from suite.models.recsys import dcnv2
from suite.models.recsys.sharding import (
    PlanError,
    ShardedEmbeddingTables,
    allreduce_dense_grads,
    check_plan,
    column_wise_row_sum,
    shard_model,
)
from suite.models.recsys.tables import TableSpec

STEPS, GLOBAL_BS = 20, 16
META = {"cardinality": {"a": 40, "b": 70, "c": 9, "genres": 12}, "sparse_features": ["a", "b", "c"],
        "multi_features": ["genres"], "n_dense": 4}
CFG = dcnv2.Config(embedding_dim=8, bottom_mlp=[16, 8], top_mlp=[16, 1], cross_layers=2, low_rank=4)
PLANS = {2: {"a": "table_wise:1", "b": "row_wise", "c": "column_wise", "genres": "table_wise:0"},
         4: {"a": "table_wise:3", "b": "row_wise", "c": "column_wise", "genres": "row_wise"}}


def batches() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    out = []
    for _ in range(STEPS):
        sparse = torch.stack([torch.randint(1, 40, (GLOBAL_BS,), generator=g),
                              torch.randint(1, 70, (GLOBAL_BS,), generator=g),
                              torch.randint(1, 9, (GLOBAL_BS,), generator=g)], dim=1)
        dense = torch.rand(GLOBAL_BS, 4, generator=g)
        label = ((sparse[:, 0] % 3 == 0) ^ (dense[:, 0] > 0.5)).float()
        out.append({"dense": dense, "sparse": sparse, "multi:genres": torch.randint(0, 12, (GLOBAL_BS, 3), generator=g),
                    "label": label})
    return out


def optimizers(model: torch.nn.Module, tables, row_sum=None):
    table_params = [p for n, p in model.named_parameters() if n.startswith("tables.")]
    dense = [p for n, p in model.named_parameters() if not n.startswith("tables.")]
    return [torch.optim.Adam(dense, lr=0.01), RowWiseAdagrad(table_params, lr=0.1, row_sum=row_sum)]


def single(perm_seed: int | None = None, halves: bool = False) -> tuple[list[float], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = dcnv2.build(CFG, META)
    opts = optimizers(model, model.tables)
    curve = []
    for b in batches():
        if perm_seed is not None:  # the same samples in another order: only the reduction order changes
            perm = torch.randperm(GLOBAL_BS, generator=torch.Generator().manual_seed(perm_seed))
            b = {k: v[perm] for k, v in b.items()}
        for o in opts:
            o.zero_grad()
        if halves:  # the global batch as two accumulated halves: the gradient summed in another order
            h = GLOBAL_BS // 2
            loss = sum(0.5 * F.binary_cross_entropy_with_logits(model(p), p["label"])
                       for p in ({k: v[:h] for k, v in b.items()}, {k: v[h:] for k, v in b.items()}))
            for part in ({k: v[:h] for k, v in b.items()}, {k: v[h:] for k, v in b.items()}):
                (0.5 * F.binary_cross_entropy_with_logits(model(part), part["label"])).backward()
        else:
            loss = F.binary_cross_entropy_with_logits(model(b), b["label"])
            loss.backward()
        for o in opts:
            o.step()
        curve.append(float(loss.detach()))
    return curve, {n: model.tables.bags[n].weight.detach().clone() for n in META["cardinality"]}


def _reversed_columns(table, entry, rank, world):
    """The bug of the negative control: column-wise shards placed in reverse rank order (the lookup then hands the
    model each row's column blocks permuted)."""
    from suite.models.recsys import sharding

    s = _shard_of(table, entry, rank, world)
    if s.placement != "column_wise":
        return s
    per = table.dim // world
    r = world - 1 - rank
    return sharding.Shard(s.table, s.placement, s.owner, s.rows, (r * per, (r + 1) * per))


_shard_of = None


def _worker(rank: int, world: int, init: str, out: str, bug: bool) -> None:
    global _shard_of
    from suite.models.recsys import sharding

    if bug:
        _shard_of, sharding.shard_of = sharding.shard_of, _reversed_columns
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        torch.manual_seed(0)  # every rank builds the same full model, then keeps its shards
        model = shard_model(dcnv2.build(CFG, META), PLANS[world], rank, world)
        opts = optimizers(model, model.tables, column_wise_row_sum(model.tables))
        local = GLOBAL_BS // world
        curve = []
        for b in batches():
            mine = {k: v[rank * local : (rank + 1) * local] for k, v in b.items()}
            loss = F.binary_cross_entropy_with_logits(model(mine), mine["label"])
            for o in opts:
                o.zero_grad()
            loss.backward()
            allreduce_dense_grads(model, world)
            for o in opts:
                o.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            curve.append(float(mean) / world)
        tables = {n: model.tables.gather_full(n) for n in META["cardinality"]}
        if rank == 0:
            torch.save({"curve": curve, "tables": tables}, out)
    finally:
        dist.destroy_process_group()


def sharded(world: int, tmp_path: Path, bug: bool = False) -> tuple[list[float], dict]:
    """Spawned, not forked, and told their rendezvous in init_method, not the environment: the ranks inherit nothing
    from this pytest process (the default process group the deepspeed backend leaves in it, by design, when a test
    ran it in-process before this one; MASTER_PORT or RANK in the environment)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        init = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    out = str(tmp_path / f"sharded_{world}_{bug}.pt")
    mp.start_processes(_worker, args=(world, init, out, bug), nprocs=world, start_method="spawn")
    got = torch.load(out)
    return got["curve"], got["tables"]


def gap(a: tuple[list[float], dict], b: tuple[list[float], dict]) -> tuple[float, float]:
    curve = max(abs(x - y) for x, y in zip(a[0], b[0], strict=True))
    # relative past magnitude 1, so one rounding of a larger value counts as one of a value near 1 (an ulp)
    tables = max(float(((a[1][n] - b[1][n]).abs() / b[1][n].abs().clamp_min(1.0)).max()) for n in a[1])
    return curve, tables


def _relative(run: tuple[list[float], dict], ref: tuple[list[float], dict]) -> list[float]:
    """Every table entry of `run` over the reference's magnitude past 1, as `gap` measures them, in one list."""
    return torch.cat([(run[1][n] / ref[1][n].abs().clamp_min(1.0)).flatten() for n in sorted(ref[1])]).tolist()


@pytest.fixture(scope="module")
def reference() -> tuple[tuple[list[float], dict], tuple[float, float]]:
    """The reference and the same-math bound (noise.bound) of its loss curve and of its tables (each entry a step of
    a 'curve': the bound takes the largest deviation over them) from the reference and K reordered runs."""
    ref = single()
    runs = [single(s) for s in (1, 2, 3)] + [single(halves=True)]
    assert len(runs) == len(REORDERINGS)  # noise.BOUND_PER_SIGMA is the t quantile for K = len(REORDERINGS)
    draws = [gap(ref, r) for r in runs]
    assert max(d[0] for d in draws) > 0 and max(d[1] for d in draws) > 0, f"reordering changed nothing: {draws}"
    none = [{} for _ in range(len(runs) + 1)]
    curve = bound([r[0] for r in (ref, *runs)], none)[0]
    tables = bound([_relative(r, ref) for r in (ref, *runs)], none)[0]
    return ref, (curve, tables)


def _check(world: int, tmp_path: Path, reference) -> None:
    ref, noise = reference
    got = gap(sharded(world, tmp_path), ref)
    assert got[0] <= SAME_MATH * noise[0] and got[1] <= SAME_MATH * noise[1], (got, noise)
    bug = gap(sharded(world, tmp_path, bug=True), ref)  # negative control: column shards in the wrong order
    assert bug[0] > 100 * SAME_MATH * noise[0] and bug[1] > 100 * SAME_MATH * noise[1], (bug, noise)


@pytest.mark.slow
def test_two_ranks_match_one_process(tmp_path: Path, reference) -> None:
    _check(2, tmp_path, reference)


@pytest.mark.slow
def test_four_ranks_match_one_process(tmp_path: Path, reference) -> None:
    _check(4, tmp_path, reference)


def test_bad_plans_are_refused_naming_the_table() -> None:
    tables = [TableSpec("item", 1_000_000, 512), TableSpec("user", 10, 6)]
    assert check_plan({"item": "row_wise", "user": "table_wise:1"}, tables, 2) == []
    assert any("unknown table 'itme'" in p for p in check_plan({"itme": "row_wise"}, tables, 2))
    assert any("table 'user': dim 6 is not divisible by 4" in p for p in check_plan({"user": "column_wise"},
                                                                                     tables, 4))
    assert any("table 'user': table_wise rank '5'" in p for p in check_plan({"user": "table_wise:5"}, tables, 2))
    big = check_plan({"item": "table_wise:0"}, tables, 2, capacity_bytes=1 << 30)
    assert any("table 'item' is larger than the sharding can place" in p for p in big), big
    assert check_plan({"item": "row_wise"}, tables, 2, capacity_bytes=1 << 30) == []  # 1.9 GiB over 2 ranks fits
    torch.manual_seed(0)
    with pytest.raises(PlanError, match="unknown table 'nope'"):
        ShardedEmbeddingTables(dcnv2.build(CFG, META).tables, {"nope": "row_wise"}, 0, 2)

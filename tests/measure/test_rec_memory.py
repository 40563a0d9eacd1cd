"""The per-rank memory estimate of a sharding plan (suite/measure/rec_memory.py) against torch's MemTracker on each
of 2 gloo ranks, for a model whose tables dominate as a recommender's do; the negative control is the estimate with
the table gradients left out (the fbgemm convention), which a torch-sharded run does not meet."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from suite.algorithms.rowwise_adagrad import RowWiseAdagrad
from suite.measure.rec_memory import rank_memory
from suite.models.recsys import dcnv2
from suite.models.recsys.sharding import allreduce_dense_grads, column_wise_row_sum, shard_model

META = {"cardinality": {"a": 30_000, "b": 12_000, "c": 4_000}, "sparse_features": ["a", "b", "c"], "n_dense": 4}
CFG = dcnv2.Config(embedding_dim=16, bottom_mlp=[32, 16], top_mlp=[32, 1], cross_layers=1, low_rank=8)
PLAN = {"a": "row_wise", "b": "table_wise:1", "c": "column_wise"}
LOCAL_BS = 64


def _worker(rank: int, world: int, init: str, out: str) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from support.memtrack import second_step_peak

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = shard_model(dcnv2.build(CFG, META), PLAN, rank, world)
        tables = [p for n, p in model.named_parameters() if n.startswith("tables.")]
        dense = [p for n, p in model.named_parameters() if not n.startswith("tables.")]
        opts = [torch.optim.Adam(dense, lr=1e-3), RowWiseAdagrad(tables, lr=0.1,
                                                                 row_sum=column_wise_row_sum(model.tables))]
        g = torch.Generator().manual_seed(rank)
        batch = {"dense": torch.rand(LOCAL_BS, 4, generator=g),
                 "sparse": torch.stack([torch.randint(1, META["cardinality"][n], (LOCAL_BS,), generator=g)
                                        for n in META["sparse_features"]], 1),
                 "label": torch.randint(0, 2, (LOCAL_BS,), generator=g).float()}

        def step() -> None:
            for o in opts:
                o.zero_grad()
            F.binary_cross_entropy_with_logits(model(batch), batch["label"]).backward()
            allreduce_dense_grads(model, world)
            for o in opts:
                o.step()

        peak = second_step_peak(step, model, *opts)
        Path(f"{out}.{rank}").write_text(json.dumps({"peak": peak, "dense": sum(p.numel() for p in dense)}))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> list[dict]:
    """Spawned, not forked, and told their rendezvous in init_method, not the environment: the ranks inherit nothing
    from this pytest process (the default process group the deepspeed backend leaves in it, by design, when a test
    ran it in-process before this one; MASTER_PORT or RANK in the environment)."""
    folder = tmp_path_factory.mktemp("mem")
    out = str(folder / "peak")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        init = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    mp.start_processes(_worker, args=(2, init, out), nprocs=2, start_method="spawn")
    return [json.loads(Path(f"{out}.{r}").read_text()) for r in range(2)]


def _estimate(rank: int, dense_params: int, **kw) -> float:
    from suite.models.recsys.tables import TableSpec

    tables = [TableSpec(n, META["cardinality"][n], CFG.embedding_dim) for n in META["sparse_features"]]
    n_feat = len(META["sparse_features"])
    lookup = 2 * LOCAL_BS * n_feat * CFG.embedding_dim * 4 * 2  # gathered rows forward + gathered grads backward
    return rank_memory(tables, PLAN, rank, 2, dense_params=dense_params, lookup_bytes=lookup, **kw).total


def test_the_estimate_matches_memtracker_on_each_rank(measured) -> None:
    for rank, m in enumerate(measured):
        est = _estimate(rank, m["dense"])
        assert est == pytest.approx(m["peak"], rel=0.15), (rank, est, m["peak"])


def test_negative_control_without_table_gradients(measured) -> None:
    for rank, m in enumerate(measured):
        est = _estimate(rank, m["dense"], dense_table_grads=False)
        assert est < 0.75 * m["peak"], (rank, est, m["peak"])

"""Expert-parallel dispatch (suite/backends/parallel/expert.py's ExpertShard, unchanged) checked by its gradients
alone (issue 50 item 18): three ep ranks as threads of this process, exchanging rows through an all_to_all that
copies what each side's split sizes say and checks nothing, as NCCL on a GPU does. gloo refuses mismatched sizes,
so in the 4-process test (test_layouts_ep.py) a dispatch with its split sizes swapped was caught only by gloo's
crash, never by the gradient comparison; here the routing is uneven between each pair (rank a sends 3 rows to a+1
and takes 1 back) with equal totals, so swapped sizes run to the end, misroute rows, and the comparison with one
process's experts must see it."""

from __future__ import annotations

import threading

import torch

from suite.backends.parallel import expert
from suite.models.common.moe import Experts

torch.set_num_threads(1)
EP, LOCAL, DIM, HIDDEN = 3, 2, 8, 12
EXPERTS = EP * LOCAL


class _ThreadedDist:
    """The few torch.distributed calls ExpertShard makes, for EP threads: each thread is a rank."""

    def __init__(self, world: int):
        self.world, self.local = world, threading.local()
        self.barrier = threading.Barrier(world, timeout=60)
        self.posted: list = [None] * world

    def get_world_size(self, group=None) -> int:
        return self.world

    def get_rank(self, group=None) -> int:
        return self.local.rank

    @staticmethod
    def _offsets(splits: list[int]) -> list[int]:
        out = [0]
        for s in splits:
            out.append(out[-1] + s)
        return out

    @torch.no_grad()
    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, group=None):
        me = self.local.rank
        even_out = [output.shape[0] // self.world] * self.world
        even_in = [input.shape[0] // self.world] * self.world
        self.posted[me] = (input, list(input_split_sizes or even_in))
        self.barrier.wait()
        out_at = self._offsets(list(output_split_sizes or even_out))
        for src in range(self.world):
            data, splits = self.posted[src]
            at = self._offsets(splits)
            chunk = data[at[me]: at[me + 1]]
            slot = output[out_at[src]: out_at[src + 1]]
            n = min(len(chunk), len(slot))  # no size check: what the sender's sizes and the receiver's slots allow
            slot[:n].copy_(chunk[:n])
        self.barrier.wait()


def _routing(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank a: 2 assignments to its own experts, 3 to rank a+1's, 1 to rank a+2's (k = 2 distinct experts a token)."""
    nxt, far = (rank + 1) % EP, (rank + 2) % EP
    chosen = torch.tensor([[2 * rank, 2 * nxt], [2 * rank + 1, 2 * nxt + 1], [2 * nxt, 2 * far]])
    weights = torch.tensor([[0.7, 0.3], [0.4, 0.6], [0.55, 0.45]])
    return chosen, weights


def _inputs(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(3, DIM, generator=g), torch.randn(3, DIM, generator=g)  # tokens, and a probe of the output


def _reference(full: Experts) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """One process: every rank's tokens through all the experts; (input gradients per rank, [w1, w3, w2] grads)."""
    xs = []
    for rank in range(EP):
        x, probe = _inputs(rank)
        x.requires_grad_(True)
        chosen, weights = _routing(rank)
        (full(x, chosen, weights) * probe).sum().backward()
        xs.append(x.grad)
    return xs, [full.w1.grad, full.w3.grad, full.w2.grad]


def _sharded(full: Experts, monkeypatch) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    fake = _ThreadedDist(EP)
    monkeypatch.setattr(expert, "dist", fake)
    xs: list = [None] * EP
    shards: list = [None] * EP
    errors: list[BaseException] = []

    def rank_body(rank: int) -> None:
        try:
            fake.local.rank = rank
            shard = expert.ExpertShard(full, group=None)
            x, probe = _inputs(rank)
            x.requires_grad_(True)
            chosen, weights = _routing(rank)
            (shard(x, chosen, weights) * probe).sum().backward()
            xs[rank], shards[rank] = x.grad, shard
        except BaseException as e:  # noqa: BLE001 - reported by the test's thread
            errors.append(e)
            fake.barrier.abort()

    threads = [threading.Thread(target=rank_body, args=(r,)) for r in range(EP)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return xs, [torch.cat([getattr(s, w).grad for s in shards]) for w in ("w1", "w3", "w2")]


def _experts() -> Experts:
    full = Experts(EXPERTS, DIM, HIDDEN)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in full.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return full


def _worst(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    return max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(got, want, strict=True))


def test_uneven_dispatch_gradients_equal_one_process_and_swapped_splits_are_seen(monkeypatch):
    want_x, want_w = _reference(_experts())
    got_x, got_w = _sharded(_experts(), monkeypatch)
    assert _worst(got_x, want_x) < 1e-5 and _worst(got_w, want_w) < 1e-5

    # the dispatch with its split sizes swapped (recv <-> send in both exchanges) runs to the end here, as on NCCL:
    # only the gradients can tell, and they do
    apply = expert._AllToAll.apply
    monkeypatch.setattr(expert._AllToAll, "apply",
                        staticmethod(lambda x, out_splits, in_splits, group: apply(x, in_splits, out_splits, group)))
    bad_x, bad_w = _sharded(_experts(), monkeypatch)
    assert _worst(bad_x, want_x) > 1e-2 or _worst(bad_w, want_w) > 1e-2

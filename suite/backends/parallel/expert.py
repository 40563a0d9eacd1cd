"""Expert parallelism (`--parallel ep=N`) of the Llama decoder's Mixture-of-Experts layers (suite/models/common/moe.py).

The experts of each MoE layer are split over the ep group: rank j keeps experts [j E/N, (j+1) E/N). Every other
parameter (attention, router, shared experts, embeddings) is replicated over ep, which behaves like dp for them:
ep ranks read different data. In each MoE layer a rank routes its own tokens, sends each (token, expert)
assignment to the rank holding that expert and gets the outputs back, with `torch.distributed.all_to_all_single`
and uneven splits (the counts per expert are exchanged first), as Megatron's all-to-all token dispatcher and
torchtitan's do. Routing, the load-balancing loss and the weighting of the k outputs stay on the token's own rank.

Gradients: backward sends the outputs' gradients back through the same exchange, so a rank's expert gradient is
the sum over the ep group's local losses. FSDP2 then shards the experts over the (dp, fsdp) ranks that hold the
same experts, dividing by the whole data-parallel size dp x ep x fsdp (torchtitan's
`set_gradient_divide_factor`), and the dense parameters are replicated over (dp, ep) and sharded over fsdp
(HSDP): every gradient is the global batch's mean, as in one process.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from suite.models.common.moe import Experts, MoE, combine, swiglu_experts


def ep_unsupported(model: nn.Module, ep: int) -> str | None:
    moes = [m for m in model.modules() if isinstance(m, MoE)]
    if not moes:
        return f"--parallel ep={ep}: the model has no Mixture-of-Experts layer (suite/models/common/moe.py) to split"
    if moes[0].cfg.experts % ep:
        return f"--parallel ep={ep} does not divide the {moes[0].cfg.experts} experts of each MoE layer"
    return None


class _AllToAll(torch.autograd.Function):
    """`all_to_all_single` with uneven splits; backward sends the gradients back the way the rows came."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, out_splits: list[int], in_splits: list[int], group: Any) -> torch.Tensor:  # type: ignore[override]
        ctx.splits, ctx.group = (out_splits, in_splits), group
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:  # type: ignore[override]
        out_splits, in_splits = ctx.splits
        back = grad.new_empty((sum(in_splits), *grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits, group=ctx.group)
        return back, None, None, None


class ExpertShard(nn.Module):
    """This rank's E/N experts of one MoE layer, called like `moe.Experts` (tokens, choices, weights) by the
    unchanged MoE block; the exchange with the other ep ranks happens inside."""

    def __init__(self, experts: Experts, group: Any):
        super().__init__()
        self.group = group
        self.ep, rank = dist.get_world_size(group), dist.get_rank(group)
        self.experts = experts.w1.shape[0]
        self.local = self.experts // self.ep
        first = rank * self.local
        # weights of the whole layer, built with the run's seed like one process's: this rank keeps its slice
        self.w1, self.w3, self.w2 = (nn.Parameter(w.detach()[first : first + self.local].clone())
                                     for w in (experts.w1, experts.w3, experts.w2))

    def forward(self, x: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        k = chosen.shape[1]
        flat = chosen.reshape(-1)
        order = torch.argsort(flat, stable=True)  # this rank's assignments by expert: by destination rank too
        counts = torch.bincount(flat, minlength=self.experts)
        # counts[s, l]: assignments that source rank s sends to this rank's local expert l
        incoming = torch.empty_like(counts)
        dist.all_to_all_single(incoming, counts, group=self.group)
        incoming = incoming.view(self.ep, self.local)
        send = counts.view(self.ep, self.local).sum(1).tolist()
        recv = incoming.sum(1).tolist()
        got = _AllToAll.apply(x[order // k], recv, send, self.group)  # rows by (source, local expert)
        expert_of = torch.arange(self.local, device=x.device).repeat(self.ep).repeat_interleave(incoming.reshape(-1))
        regroup = torch.argsort(expert_of, stable=True)  # by local expert, sources in rank order inside
        y = swiglu_experts(got[regroup], incoming.sum(0).tolist(), self.w1, self.w3, self.w2)
        back = _AllToAll.apply(y[torch.argsort(regroup)], send, recv, self.group)
        return combine(back[torch.argsort(order)], weights)


def apply_ep(model: nn.Module, ep_mesh: Any) -> list[ExpertShard]:
    """Each MoE layer's experts replaced by this rank's shard (in place); the shards."""
    group = ep_mesh.get_group()
    shards = []
    for module in list(model.modules()):
        if isinstance(module, MoE):
            module.experts = ExpertShard(module.experts, group)  # type: ignore[assignment]
            shards.append(module.experts)
    return shards


def shard_experts(shards: list[ExpertShard], mesh: Any, mp_policy: Any, data_parallel: int) -> None:
    """FSDP2 on each expert shard over the (dp, fsdp) ranks holding the same experts, its gradients divided by the
    whole data-parallel size (its local gradient sums the ep group's losses).

    With several shard ranks the reductions are forced to plain sums followed by the division (gloo has no
    pre-multiplied sum). With one (fsdp=1) they must not be: torch 2.13's FSDP2 then divides in its single-rank
    copy and, forced to sums, divides again afterwards (seen: expert gradients 1/ep of one process's)."""
    from torch.distributed.fsdp import fully_shard

    for shard in shards:
        fully_shard(shard, mesh=mesh, mp_policy=mp_policy)
        for p in shard.parameters():  # FSDP2's sharded parameters: marked for the ep-aware norm (clip_grad_norm)
            p._expert_shard = True  # type: ignore[attr-defined]
        shard.set_gradient_divide_factor(float(data_parallel))  # type: ignore[operator]
        shard.set_force_sum_reduction_for_comms(mesh.size(-1) > 1)  # type: ignore[operator]


def meshes(mesh: Any) -> tuple[Any, Any]:
    """(dense mesh, expert mesh) of a (pp, dp, ep, fsdp, tp) mesh with pp = tp = 1: dense parameters replicated
    over dp x ep and sharded over fsdp (HSDP; plain replication when fsdp is 1); experts replicated over dp,
    sharded over fsdp. The dense mesh is a second mesh over the same ranks in the same row-major order (torch 2.13
    warns that slicing a flattened (dp, ep) dimension out of the root mesh is going away)."""
    from torch.distributed.device_mesh import init_device_mesh

    shape = dict(zip(mesh.mesh_dim_names, mesh.mesh.shape, strict=True))
    if shape["pp"] != 1 or shape["tp"] != 1:
        raise ValueError("expert parallelism composes with dp and fsdp only (pp = tp = 1)")
    dense = init_device_mesh(mesh.device_type, (shape["dp"] * shape["ep"], shape["fsdp"]),
                             mesh_dim_names=("dp_ep", "fsdp"))
    return dense, mesh["dp", "fsdp"]


@torch.no_grad()
def clip_grad_norm(params: list[nn.Parameter], max_norm: float, ep_group: Any) -> torch.Tensor:
    """`clip_grad_norm_` over dense and expert gradients, which live on different meshes (torch's refuses to stack
    them): each parameter's whole norm over its own mesh, the experts' summed over the ep group (each rank holds
    other experts); every gradient scaled by max_norm / norm when that is below 1. Returns the norm."""
    from torch.distributed.tensor import DTensor

    def whole_sq(grads: list[torch.Tensor]) -> torch.Tensor:
        sq = torch.zeros((), dtype=torch.float32, device=grads[0].device if grads else None)
        for g in grads:
            n = torch.linalg.vector_norm(g, dtype=torch.float32)
            sq += (n.full_tensor() if isinstance(n, DTensor) else n) ** 2
        return sq

    grads = [(p.grad, _is_expert(p)) for p in params if p.grad is not None]
    expert_sq = whole_sq([g for g, e in grads if e])
    dist.all_reduce(expert_sq, group=ep_group)
    norm = (whole_sq([g for g, e in grads if not e]) + expert_sq).sqrt()
    scale = float(max_norm / (norm + 1e-6))
    if scale < 1.0:
        for g, _ in grads:
            g.mul_(scale)
    return norm


def _is_expert(p: nn.Parameter) -> bool:
    return getattr(p, "_expert_shard", False)

"""A Mixture-of-Experts feed-forward block: top-k router, dropless expert computation, optional shared experts,
and the Switch / GShard auxiliary load-balancing loss.

Routing follows the two families the MLPerf LLM benchmarks train:
- `score: softmax` (Mixtral, gpt-oss, Qwen-MoE): probabilities over all experts, the top k kept, renormalised
  over those k when `normalize_top_k` (softmax over the top-k logits, gpt-oss's form, is the same thing);
- `score: sigmoid` (DeepSeek-V3): independent sigmoid scores; the choice may add a per-expert bias
  (`score_bias`, DeepSeek's aux-loss-free balancing; this block only holds it, nothing updates it yet) and may be
  limited to the best `topk_groups` of `groups` expert groups; the chosen scores are renormalised and multiplied
  by `routed_scaling`.

Dropless: every (token, expert) assignment is computed. Assignments are sorted by expert, each expert runs one
matmul chain on its contiguous slice, and the results go back to token order; nothing is dropped for capacity.
The auxiliary loss reaches the gradient through `_AttachAuxLoss` on the block's output (Megatron's
MoEAuxLossAutoScaler), so a workload's loss needs no change; its value is kept in `aux_loss` for logging.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.common.configs import MoEConfig
from suite.models.common.layers import SwiGLU, swiglu_params


def load_balancing_loss(probs: torch.Tensor, chosen: torch.Tensor, top_k: int) -> torch.Tensor:
    """Switch Transformer's loss for top-k routing, as Megatron's `switch_load_balancing_loss_func`:
    E * sum_i f_i * P_i, f_i = share of the T * k assignments that went to expert i, P_i = mean router
    probability of expert i. 1.0 when balanced. (Hugging Face's Mixtral loss divides f_i by T, not T * k: k x this.)

    probs: (T, E) full-distribution scores; chosen: (T, k) expert indices."""
    tokens, experts = probs.shape
    counts = torch.bincount(chosen.reshape(-1), minlength=experts).to(probs.dtype)
    return experts * torch.sum(counts / (tokens * top_k) * probs.mean(0))


class Router(nn.Module):
    score_bias: torch.Tensor

    def __init__(self, dim: int, cfg: MoEConfig):
        super().__init__()
        self.cfg = cfg
        self.weight = nn.Parameter(torch.empty(cfg.experts, dim))
        if cfg.score_bias:
            self.register_buffer("score_bias", torch.zeros(cfg.experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: (T, dim) -> chosen experts (T, k), their weights (T, k, fp32), the unweighted aux loss."""
        cfg = self.cfg
        logits = F.linear(x, self.weight)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 -> fp32; fp64 stays
        scores = logits.softmax(-1) if cfg.score == "softmax" else logits.sigmoid()
        choice = scores + self.score_bias if cfg.score_bias else scores
        if cfg.groups > 1:  # DeepSeek-V3: keep the topk_groups groups whose best two experts score highest
            grouped = choice.view(-1, cfg.groups, cfg.experts // cfg.groups)
            best_groups = grouped.topk(2, dim=-1).values.sum(-1).topk(cfg.topk_groups, dim=-1).indices
            keep = torch.zeros_like(grouped[..., 0], dtype=torch.bool).scatter_(1, best_groups, True)
            choice = grouped.masked_fill(~keep[..., None], float("-inf")).view(-1, cfg.experts)
        chosen = choice.topk(cfg.top_k, dim=-1).indices
        weights = scores.gather(1, chosen)
        if cfg.normalize_top_k:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        weights = weights * cfg.routed_scaling
        # the balancing loss sees the plain distribution and its plain top-k (no bias, no groups), as Megatron's
        # compute_routing_scores_for_aux_loss; sigmoid scores are normalised over the experts first
        probs = scores if cfg.score == "softmax" else scores / (scores.sum(-1, keepdim=True) + 1e-20)
        plain = chosen if not (cfg.score_bias or cfg.groups > 1) else probs.topk(cfg.top_k, dim=-1).indices
        return chosen, weights, load_balancing_loss(probs, plain, cfg.top_k)


class Experts(nn.Module):
    """E SwiGLU experts as stacked weights (torchtitan's GroupedExperts layout): w1/w3 (E, hidden, dim),
    w2 (E, dim, hidden). One matmul chain per expert over its sorted slice of tokens (a grouped GEMM's work)."""

    def __init__(self, experts: int, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(experts, hidden, dim))
        self.w3 = nn.Parameter(torch.empty(experts, hidden, dim))
        self.w2 = nn.Parameter(torch.empty(experts, dim, hidden))

    def forward(self, x: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        tokens, k = chosen.shape
        flat = chosen.reshape(-1)
        order = torch.argsort(flat, stable=True)  # assignments grouped by expert, token order kept inside
        counts = torch.bincount(flat, minlength=self.w1.shape[0]).tolist()
        y = swiglu_experts(x[order // k], counts, self.w1, self.w3, self.w2)[torch.argsort(order)]
        return combine(y, weights)


def swiglu_experts(routed: torch.Tensor, counts: list[int], w1: torch.Tensor, w3: torch.Tensor,
                   w2: torch.Tensor) -> torch.Tensor:
    """Expert e's SwiGLU on its slice of `routed` (rows sorted by expert, counts[e] of them). An empty slice runs
    too (no FLOPs): every expert's weights get a gradient, zero where no token came (as the stacked weights of one
    process get), which expert parallelism (suite/backends/parallel/expert.py) relies on."""
    outputs = [F.linear(F.silu(F.linear(xe, w1[e])) * F.linear(xe, w3[e]), w2[e])
               for e, xe in enumerate(routed.split(counts))]
    return torch.cat(outputs)


def combine(y: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(token, slot) expert outputs (T * k, dim) weighted by the router and summed over the k slots."""
    tokens, k = weights.shape
    return (y.view(tokens, k, -1) * weights.to(y.dtype).unsqueeze(-1)).sum(1)


class _AttachAuxLoss(torch.autograd.Function):
    """Identity on the block's output whose backward also sends d(total loss)/d(aux) = `grad_scale` into the
    aux loss (Megatron's MoEAuxLossAutoScaler). A backend that divides the loss by the micro-batches of a step
    sets `grad_scale` to the same factor (a float, or a 0-d tensor on the loss's device: no host sync)."""

    grad_scale: float | torch.Tensor = 1.0

    @staticmethod
    def forward(ctx, output: torch.Tensor, aux: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(aux)
        return output

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        (aux,) = ctx.saved_tensors
        return grad, torch.ones_like(aux) * _AttachAuxLoss.grad_scale


def set_aux_loss_grad_scale(scale: float | torch.Tensor) -> None:
    _AttachAuxLoss.grad_scale = scale.detach() if isinstance(scale, torch.Tensor) else float(scale)


class MoE(nn.Module):
    def __init__(self, dim: int, cfg: MoEConfig):
        super().__init__()
        self.cfg = cfg
        self.router = Router(dim, cfg)
        self.experts = Experts(cfg.experts, dim, cfg.expert_ffn_dim)
        self.shared = SwiGLU(dim, cfg.expert_ffn_dim * cfg.shared_experts) if cfg.shared_experts else None
        self.aux_loss = torch.zeros(())  # the last forward's unweighted balancing loss (detached)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        chosen, weights, aux = self.router(flat)
        y = self.experts(flat, chosen, weights)
        if self.shared is not None:
            y = y + self.shared(flat)
        self.aux_loss = aux.detach()
        if self.training and self.cfg.aux_loss_coeff > 0 and torch.is_grad_enabled():
            y = _AttachAuxLoss.apply(y, aux * self.cfg.aux_loss_coeff)
        return y.view_as(x)


def moe_active_params(dim: int, cfg: MoEConfig) -> int:
    """Matmul parameters one token passes through: the router, its k experts, the shared experts."""
    return dim * cfg.experts + (cfg.top_k + cfg.shared_experts) * swiglu_params(dim, cfg.expert_ffn_dim)


def moe_total_params(dim: int, cfg: MoEConfig) -> int:
    return dim * cfg.experts + (cfg.experts + cfg.shared_experts) * swiglu_params(dim, cfg.expert_ffn_dim)

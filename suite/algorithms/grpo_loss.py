"""GRPO's update (Shao et al. 2024, DeepSeekMath): group-normalised advantages and the clipped policy-gradient loss
with an optional KL penalty to a frozen reference, averaged per token or per sequence (the `grpo:` block it reads is
suite/algorithms/grpo.py's Config).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from suite.algorithms.grpo import Config


def group_advantages(rewards: torch.Tensor, group_size: int, normalize_std: bool = True,
                     eps: float = 1e-6) -> torch.Tensor:
    """(n_prompts * G,) rewards, grouped by prompt in consecutive runs of G -> each one's reward minus its group's
    mean, divided by the group's (unbiased) std when normalize_std (veRL's compute_grpo_outcome_advantage)."""
    r = rewards.float().view(-1, group_size)
    adv = r - r.mean(dim=1, keepdim=True)
    if normalize_std:
        adv = adv / (r.std(dim=1, keepdim=True) + eps)
    return adv.reshape(-1)


def kl_low_var(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(policy || ref) per token, clamped as veRL's `low_var_kl`."""
    log_ratio = (ref_logp - logp).clamp(-20, 20)
    return (log_ratio.exp() - log_ratio - 1).clamp(-10, 10)


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "token":
        return (values * mask).sum() / mask.sum().clamp(min=1)
    per_seq = (values * mask).sum(1) / mask.sum(1).clamp(min=1)
    return per_seq.mean()


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                cfg: Config, ref_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped surrogate -min(r A, clip(r, 1-e, 1+e) A), r = pi/pi_old per token, plus kl_coef x KL(pi||ref);
    logp, old_logp, ref_logp, mask (B, T), advantages (B,). Returns the loss and its parts for the log."""
    ratio = (logp - old_logp).exp()
    adv = advantages[:, None]
    surrogate = -torch.min(ratio * adv, ratio.clamp(1 - cfg.clip_ratio, 1 + cfg.clip_ratio) * adv)
    loss = aggregate(surrogate, mask, cfg.loss_agg)
    parts = {"pg_loss": float(loss.detach())}
    if cfg.kl_coef > 0 and ref_logp is not None:
        kl = aggregate(kl_low_var(logp, ref_logp), mask, cfg.loss_agg)
        loss = loss + cfg.kl_coef * kl
        parts["kl"] = float(kl.detach())
    with torch.no_grad():
        clipped = ((ratio - 1).abs() > cfg.clip_ratio).float()
        parts["clip_frac"] = float((clipped * mask).sum() / mask.sum().clamp(min=1))
    return loss, parts

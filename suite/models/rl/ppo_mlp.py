"""Actor-critic MLP for PPO (separate policy and value towers, orthogonal init as in CleanRL / the PPO
paper's MuJoCo setup): a categorical head for discrete actions, a Gaussian with state-independent log-std
for continuous ones, and an optional running observation normaliser kept as buffers (saved with the model)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from suite.models.rl.ppo_mlp_config import Config
from suite.registry import Component


class ObsNorm(nn.Module):
    """Running mean/variance (Chan et al. parallel update); identity until `update` is first called."""

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.tensor(1e-4))
        self.enabled = False

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        self.enabled = True
        b_mean, b_var, b_n = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        delta, total = b_mean - self.mean, self.count + b_n
        self.mean += delta * b_n / total
        self.var.copy_((self.var * self.count + b_var * b_n + delta**2 * self.count * b_n / total) / total)
        self.count.copy_(total)

    def _apply(self, fn: Any, recurse: bool = True) -> ObsNorm:
        # a backend that casts the whole model to bf16/fp16 (DeepSpeed) would cast the running statistics too,
        # and a bf16 count stops growing at 256: they stay fp32 wherever the model goes
        super()._apply(fn, recurse)
        for name in ("mean", "var", "count"):
            buf = getattr(self, name)
            if buf.dtype != torch.float32:
                setattr(self, name, buf.float())
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        return ((x - self.mean) / torch.sqrt(self.var + 1e-8)).clamp(-10, 10).to(x.dtype)


def _tower(dims: list[int], act: type[nn.Module], out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        lin = nn.Linear(a, b)
        last = i == len(dims) - 2
        nn.init.orthogonal_(lin.weight, out_gain if last else math.sqrt(2))
        nn.init.zeros_(lin.bias)
        layers.append(lin)
        if not last:
            layers.append(act())
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    def __init__(self, cfg: Config, meta: dict[str, Any]):
        super().__init__()
        act = nn.Tanh if cfg.activation == "tanh" else nn.ReLU
        obs, n_act = int(meta["obs_dim"]), int(meta["n_actions"])
        self.continuous = bool(meta["continuous"])
        self.obs_norm = ObsNorm(obs)
        self.actor = _tower([obs, *cfg.hidden, n_act], act, 0.01)
        self.critic = _tower([obs, *cfg.hidden, 1], act, 1.0)
        if self.continuous:
            self.log_std = nn.Parameter(torch.full((n_act,), cfg.log_std_init))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(policy head, state values). The head is the action logits, or for continuous actions the Gaussian
        means and log-stds side by side: every parameter is read inside forward, where a sharding wrapper
        (ZeRO-3, FSDP) has gathered it; `log_std` read outside would be this rank's empty shard."""
        x = self.obs_norm(obs)
        head = self.actor(x)
        if self.continuous:
            head = torch.cat([head, self.log_std.expand_as(head)], dim=-1)
        return head, self.critic(x).squeeze(-1)

    def distribution(self, head: torch.Tensor) -> Distribution:
        if self.continuous:
            mean, log_std = head.chunk(2, dim=-1)
            return Normal(mean, log_std.exp())
        return Categorical(logits=head)

    def log_prob(self, dist: Distribution, action: torch.Tensor) -> torch.Tensor:
        lp = dist.log_prob(action)
        return lp.sum(-1) if self.continuous else lp

    def entropy(self, dist: Distribution) -> torch.Tensor:
        e = dist.entropy()
        return e.sum(-1) if self.continuous else e

    def greedy(self, head: torch.Tensor) -> torch.Tensor:
        return head.chunk(2, dim=-1)[0] if self.continuous else head.argmax(-1)


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    return ActorCritic(cfg, meta)


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    """Per minibatch transition: forward + backward of both towers (2*fin*fout per linear, 3x). The rollout's
    and evaluation's forward passes are acting, not training, and are not counted (as in MLPerf's MFU)."""
    obs, n_act = int(meta["obs_dim"]), int(meta["n_actions"])
    fwd = 0.0
    for out in (n_act, 1):
        dims = [obs, *cfg.hidden, out]
        fwd += sum(2 * a * b for a, b in zip(dims[:-1], dims[1:], strict=True))
    return 3.0 * fwd


def flops_by_class(cfg: Config, meta: dict[str, Any]) -> dict[str, float]:
    """All model FLOPs are matmuls (suite/measure/op_dtypes.py picks their dtype's peak)."""
    return {"matmul": flops_per_sample(cfg, meta)}


COMPONENT = Component(Config, build=build, flops_per_sample=flops_per_sample, flops_by_class=flops_by_class)

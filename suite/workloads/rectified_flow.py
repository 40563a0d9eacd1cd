"""Rectified flow (flow matching), as the MLPerf flux1 reference trains and evaluates it.

x_t = (1 - t) * x_0 + t * noise (t = 0 is data, t = 1 is noise); the model predicts the velocity noise - x_0 and the
loss is its mean squared error. Training timesteps are uniform in [0, 1) (the reference: `torch.rand((bsz,))` in
torchtitan/experiments/flux/train.py) or logit-normal (SD3, Esser et al. 2024, section 3.1). Validation: each
sample has a fixed timestep index i in 0..n-1 (t = i / n; MLPerf: 8, "averaged over 8 equidistant time steps
[0, 7/8]") and fixed noise, and the loss is the mean over timesteps of the mean per timestep, so it is
deterministic. Sampling: Euler steps of the velocity from t = 1 to 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

SAMPLERS = ("uniform", "logit_normal")


def sample_timesteps(n: int, method: str, g: torch.Generator, mean: float = 0.0, std: float = 1.0) -> torch.Tensor:
    if method == "uniform":
        return torch.rand(n, generator=g)
    if method == "logit_normal":
        return torch.sigmoid(mean + std * torch.randn(n, generator=g))
    raise ValueError(f"timestep_sampling {method!r}: expected one of {', '.join(SAMPLERS)}")


def interpolate(x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    tt = t.view(-1, *([1] * (x0.dim() - 1))).to(x0)
    return (1 - tt) * x0 + tt * noise


def velocity(x0: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    return noise - x0


def per_sample_loss(pred: torch.Tensor, x0: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    return (pred.float() - velocity(x0, noise).float()).pow(2).flatten(1).mean(dim=1)


class TimestepMeans:
    """Sums and counts per validation timestep; the loss is the mean of the per-timestep means (MLPerf's)."""

    def __init__(self, n: int):
        self.sums, self.counts = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)

    def add(self, losses: torch.Tensor, index: torch.Tensor) -> None:
        self.sums.index_add_(0, index.cpu().long(), losses.detach().cpu().double())
        self.counts.index_add_(0, index.cpu().long(), torch.ones(len(index), dtype=torch.float64))

    def value(self) -> float:
        seen = self.counts > 0
        return float((self.sums[seen] / self.counts[seen]).mean())


@torch.no_grad()
def euler_sample(velocity_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], noise: torch.Tensor,
                 steps: int) -> torch.Tensor:
    """Integrate dx/dt = v(x, t) from t = 1 (noise) to t = 0 (data) in `steps` equal Euler steps."""
    x = noise
    ts = torch.linspace(1.0, 0.0, steps + 1)
    for t_now, t_next in zip(ts[:-1], ts[1:], strict=True):
        v = velocity_fn(x, torch.full((x.shape[0],), float(t_now), dtype=x.dtype, device=x.device))
        x = x + (t_next - t_now) * v
    return x

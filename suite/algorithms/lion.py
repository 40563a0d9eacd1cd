"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Algorithm 2): sign of interpolated momentum.

    c = beta1 * m + (1 - beta1) * g
    p = p - lr * (sign(c) + weight_decay * p)
    m = beta2 * m + (1 - beta2) * g

The paper suggests an lr 3-10x smaller than AdamW's and a weight decay 3-10x larger (the update has unit
magnitude per coordinate, so lr alone sets the step size).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


class Lion(torch.optim.Optimizer):
    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ):
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), wd = group["lr"], group["betas"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                m = state["exp_avg"]
                update = m.mul(beta1).add_(p.grad, alpha=1 - beta1).sign_()
                p.mul_(1 - lr * wd)  # decoupled decay: lr * wd * p, as in the paper
                p.add_(update, alpha=-lr)
                m.mul_(beta2).add_(p.grad, alpha=1 - beta2)
        return loss

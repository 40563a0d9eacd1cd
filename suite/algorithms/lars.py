"""LARS (You et al. 2017) as MLPerf's ResNet-50 reference implements it (mlcommons/training, retired
image_classification/tensorflow2/lars_optimizer.py `compute_lr` and `_apply_dense`).

Per tensor: trust ratio = eeta * ||w|| / (||g|| + wd * ||w|| + epsilon) (1 where a norm is 0), the decay
added to the gradient, then TensorFlow's momentum (the learning rate inside the accumulator:
m = momentum * m + lr * ratio * (g + wd * w); w -= m). Tensors of fewer than 2 dimensions (biases, BN) are
skipped by both the trust ratio and the decay, as the reference's skip list (`bn`, `bias`) does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


class LARS(torch.optim.Optimizer):
    def __init__(self, params: Iterable[Any], lr: float = 10.0, momentum: float = 0.9, weight_decay: float = 2e-4,
                 eeta: float = 0.001, epsilon: float = 0.0, nesterov: bool = False):
        if lr <= 0 or not 0 <= momentum < 1 or weight_decay < 0 or eeta <= 0 or epsilon < 0:
            raise ValueError("LARS: lr > 0, 0 <= momentum < 1, weight_decay >= 0, eeta > 0, epsilon >= 0")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, eeta=eeta,
                                      epsilon=epsilon, nesterov=nesterov))

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, mom, wd = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad.float()
                w = p.float()
                scaled_lr = torch.as_tensor(lr, dtype=torch.float32, device=p.device)
                if p.ndim >= 2:
                    w_norm, g_norm = w.norm(2), g.norm(2)
                    ratio = torch.where((w_norm > 0) & (g_norm > 0),
                                        group["eeta"] * w_norm / (g_norm + wd * w_norm + group["epsilon"]),
                                        torch.ones_like(w_norm))
                    scaled_lr = scaled_lr * ratio
                    g = g + wd * w
                buf = self.state[p].get("momentum")
                if buf is None:
                    buf = self.state[p]["momentum"] = torch.zeros_like(w)
                update = g * scaled_lr
                buf.mul_(mom).add_(update)
                step = update + mom * buf if group["nesterov"] else buf
                p.sub_(step.to(p.dtype))
        return loss

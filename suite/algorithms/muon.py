"""Muon (Keller Jordan, modded-nanogpt): momentum orthogonalised by a Newton-Schulz iteration for matrix weights.

For every parameter with ndim >= 2 (a conv filter bank is flattened to out x (in * kh * kw), as in Jordan's
CIFAR-10 speedruns) the update is the nearest semi-orthogonal matrix to the (Nesterov) momentum, scaled by
sqrt(max(1, rows / cols)); every other parameter (biases, norms' gains) is trained by AdamW with its own lr.
The quintic Newton-Schulz coefficients (3.4445, -4.7750, 2.0315) trade exactness for speed: singular values
land in roughly [0.7, 1.2], not exactly 1 (see tests/algorithms/test_algorithms.py).
Limitation: it cannot tell an embedding or the output head from a hidden layer (it sees only tensors); the
modded-nanogpt records give those to Adam. Pass `adamw_params` ids via param groups if that matters to you.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

NS_COEFFS = (3.4445, -4.7750, 2.0315)


def zeropower_via_newtonschulz5(g: torch.Tensor, steps: int = 5, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Approximate U V^T of g = U S V^T (the orthogonal polar factor) by `steps` quintic Newton-Schulz steps."""
    assert g.ndim == 2, "Newton-Schulz works on matrices"
    a, b, c = NS_COEFFS
    # bf16 on accelerators as in modded-nanogpt; fp32 on CPU where bf16 matmuls are emulated and slow
    dtype = dtype or (torch.bfloat16 if g.device.type in ("cuda", "npu") else torch.float32)
    x = g.to(dtype)
    transposed = g.size(0) > g.size(1)
    if transposed:
        x = x.T
    x = x / (x.norm() + 1e-7)  # spectral norm <= Frobenius norm <= 1, inside the iteration's basin
    for _ in range(steps):
        gram = x @ x.T
        poly = b * gram + c * gram @ gram
        x = a * x + poly @ x
    if transposed:
        x = x.T
    return x.to(g.dtype)


class Muon(torch.optim.Optimizer):
    groups_params_itself = True  # build_optimizer hands it tensors and applies optimizer.decay to its groups

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 0.02,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        weight_decay: float = 0.0,
        adamw_lr: float = 3e-3,
        adamw_betas: tuple[float, float] = (0.9, 0.95),
        adamw_eps: float = 1e-8,
    ):
        if lr <= 0 or adamw_lr <= 0:
            raise ValueError(f"lr and adamw_lr must be > 0, got {lr}, {adamw_lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        params = list(params)
        if params and isinstance(params[0], dict):
            raise ValueError("Muon splits parameters itself (ndim >= 2 -> Muon, the rest -> AdamW): pass tensors")
        matrices = [p for p in params if p.ndim >= 2]
        others = [p for p in params if p.ndim < 2]
        defaults = {
            "lr": lr, "momentum": momentum, "nesterov": nesterov, "ns_steps": ns_steps,
            "weight_decay": weight_decay, "betas": tuple(adamw_betas), "eps": adamw_eps, "use_muon": True,
        }
        groups: list[dict[str, Any]] = []
        if matrices:
            groups.append({"params": matrices, "use_muon": True})
        if others:  # its own lr, so that a schedule scales both groups from their own base lr
            groups.append({"params": others, "use_muon": False, "lr": adamw_lr})
        super().__init__(groups, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["use_muon"]:
                self._muon_group(group)
            else:
                self._adamw_group(group)
        return loss

    def _muon_group(self, group: dict[str, Any]) -> None:
        lr, mom, wd = group["lr"], group["momentum"], group["weight_decay"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state["momentum_buffer"] = torch.zeros_like(p)
            buf = state["momentum_buffer"]
            buf.lerp_(p.grad, 1 - mom)
            update = p.grad.lerp(buf, mom) if group["nesterov"] else buf
            matrix = update.reshape(update.size(0), -1)
            ortho = zeropower_via_newtonschulz5(matrix, group["ns_steps"])
            ortho = ortho * max(1.0, matrix.size(0) / matrix.size(1)) ** 0.5
            p.mul_(1 - lr * wd)
            p.add_(ortho.view_as(p), alpha=-lr)

    def _adamw_group(self, group: dict[str, Any]) -> None:
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
            state["step"] += 1
            t = state["step"]
            m, v = state["exp_avg"], state["exp_avg_sq"]
            m.lerp_(p.grad, 1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            denom = (v / (1 - b2**t)).sqrt_().add_(eps)
            p.mul_(1 - lr * wd)
            p.addcdiv_(m, denom, value=-lr / (1 - b1**t))

"""MLPerf dlrmv4's optimizer pair as one torch optimizer: Adam for the dense parameters and row-wise Adagrad for the
embedding tables (parameters marked `embedding_table`, as suite/models/recsys/tables.py marks its tables), one
learning rate for both, which the schedule moves in lockstep (closed_dlrmv4.yaml: `opt_sparse_base_learning_rate`
equals `opt_base_learning_rate`). The Adam update is torch.optim.Adam's single-tensor one; the row-wise one is
suite/algorithms/rowwise_adagrad.py's (one accumulator per row, the mean of the row's squared gradient).
Weight decay, if any, applies to the dense parameters only (the reference's sparse optimizer has none)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch


def is_table(p: torch.Tensor) -> bool:
    return bool(getattr(p, "embedding_table", False))


class AdamRowWiseAdagrad(torch.optim.Optimizer):
    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        if lr <= 0:
            raise ValueError(f"AdamRowWiseAdagrad: lr must be > 0, got {lr}")
        groups = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        split: list[dict[str, Any]] = []
        for g in groups:
            ps = list(g["params"])
            rest = {k: v for k, v in g.items() if k != "params"}
            split += [{**rest, "params": [p for p in ps if not is_table(p)], "sparse": False},
                      {**rest, "params": [p for p in ps if is_table(p)], "sparse": True, "weight_decay": 0.0}]
        split = [g for g in split if g["params"]]
        if not any(g["sparse"] for g in split):
            raise ValueError("AdamRowWiseAdagrad: no embedding table among the parameters (none marked "
                             "`embedding_table`; a deepcopy drops the mark): the tables would silently get Adam")
        super().__init__(split, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            lr, eps = group["lr"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g, state = p.grad, self.state[p]
                if group["sparse"]:
                    if p.dim() != 2:
                        raise ValueError(f"row-wise Adagrad takes embedding tables (2-D), got a {p.dim()}-D one")
                    if "sum" not in state:
                        state["sum"] = torch.zeros(p.shape[0], dtype=p.dtype, device=p.device)
                    sq, cols = (g * g).sum(1), g.shape[1]
                    if (row_sum := getattr(p, "row_sum", None)) is not None:  # a column-wise shard: the whole row's
                        sq, cols = row_sum(p, sq, cols)  # (suite/backends/parallel/tables.py)
                    state["sum"].add_(sq / max(cols, 1))
                    p.addcdiv_(g, state["sum"].sqrt().add_(eps).unsqueeze(1), value=-lr)
                    continue
                beta1, beta2 = group["betas"]
                if group["weight_decay"]:
                    g = g.add(p, alpha=group["weight_decay"])  # Adam's (L2) weight decay, as torch.optim.Adam
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                state["exp_avg"].lerp_(g, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(g, g, value=1 - beta2)
                bias1 = 1 - beta1 ** state["step"]
                bias2_sqrt = math.sqrt(1 - beta2 ** state["step"])
                denom = (state["exp_avg_sq"].sqrt() / bias2_sqrt).add_(eps)
                p.addcdiv_(state["exp_avg"], denom, value=-lr / bias1)
        return loss

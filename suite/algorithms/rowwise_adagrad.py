"""Row-wise Adagrad, the sparse optimizer of MLPerf dlrmv4 (`opt_sparse_name: RowWiseAdagrad`) and of TorchRec /
fbgemm's embedding tables: one accumulator per row, the mean of the row's squared gradient, so the state is rows
floats instead of rows x dim. w_row -= lr * g_row / (sqrt(sum_row) + eps).

A row that no sample looked up has a zero gradient and moves not at all, as in fbgemm's sparse update. When a table
is split by columns over ranks, `row_sum` (sum of squares, columns) -> (sum, columns) over every rank's slice keeps
the accumulator of the whole row (suite/models/recsys/sharding.py's `column_wise_row_sum`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

RowSum = Callable[[torch.Tensor, torch.Tensor, int], tuple[torch.Tensor, int]]


class RowWiseAdagrad(torch.optim.Optimizer):
    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float = 0.01, eps: float = 1e-8,
                 row_sum: RowSum | None = None):
        if lr <= 0:
            raise ValueError(f"RowWiseAdagrad: lr must be > 0, got {lr}")
        super().__init__(params, {"lr": lr, "eps": eps})
        self.row_sum = row_sum

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dim() != 2:
                    raise ValueError(f"RowWiseAdagrad takes embedding tables (2-D), got a {p.dim()}-D parameter")
                g = p.grad
                sq, cols = (g * g).sum(1), g.shape[1]
                if self.row_sum is not None:
                    sq, cols = self.row_sum(p, sq, cols)
                state = self.state[p]
                if "sum" not in state:
                    state["sum"] = torch.zeros(p.shape[0], dtype=p.dtype, device=p.device)
                state["sum"].add_(sq / max(cols, 1))
                std = state["sum"].sqrt().add_(group["eps"]).unsqueeze(1)
                p.addcdiv_(g, std, value=-group["lr"])
        return loss

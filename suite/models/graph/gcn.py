"""Graph convolutional network (Kipf & Welling 2017) for node classification, in plain torch:
H' = act(D^-1/2 (A + I) D^-1/2 H W), the normalised adjacency applied as one sparse matrix."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.graph.gcn_config import Config
from suite.registry import Component


def normalized_adjacency(edge_index: torch.Tensor, edge_weight: torch.Tensor, n: int) -> torch.Tensor:
    """D^-1/2 (A + I) D^-1/2 as a sparse COO tensor (self-loops weight 1)."""
    loops = torch.arange(n, device=edge_index.device)
    idx = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
    w = torch.cat([edge_weight, torch.ones(n, device=edge_weight.device, dtype=edge_weight.dtype)])
    deg = torch.zeros(n, device=w.device, dtype=w.dtype).index_add_(0, idx[0], w)
    dinv = deg.pow(-0.5)
    w = dinv[idx[0]] * w * dinv[idx[1]]
    return torch.sparse_coo_tensor(idx, w, (n, n), check_invariants=True).coalesce()


class GCN(nn.Module):
    def __init__(self, dims: list[int], dropout: float):
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.dropout = dropout

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        for i, lin in enumerate(self.linears):
            x = F.dropout(x, self.dropout, self.training)
            x = torch.sparse.mm(adj, lin(x))
            if i < len(self.linears) - 1:
                x = F.relu(x)
        return x


def _dims(cfg: Config, meta: dict[str, Any]) -> list[int]:
    return [int(meta["num_features"]), *cfg.hidden, int(meta["num_classes"])]


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    return GCN(_dims(cfg, meta), cfg.dropout)


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    """One sample = one full-graph pass. Per layer (suite.measure.flops.gcn_layer_train_flops): the dense transform
    2*N*fin*fout, 3x for forward + backward; the propagation, a sparse matmul with E+N non-zeros (self-loops),
    2*(E+N)*fout forward and as much backward (the adjacency itself has no gradient), so 2x."""
    from suite.measure.flops import gcn_layer_train_flops

    n, e = int(meta["num_nodes"]), int(meta["num_edges"])
    dims = _dims(cfg, meta)
    return sum(gcn_layer_train_flops(n, e + n, a, b) for a, b in zip(dims[:-1], dims[1:], strict=True))


def flops_by_class(cfg: Config, meta: dict[str, Any]) -> dict[str, float]:
    """All model FLOPs are matmuls (suite/measure/op_dtypes.py picks their dtype's peak)."""
    return {"matmul": flops_per_sample(cfg, meta)}


COMPONENT = Component(Config, build=build, flops_per_sample=flops_per_sample, flops_by_class=flops_by_class)

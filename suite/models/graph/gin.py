"""GIN with edge features (GINE; Xu et al. 2019, Hu et al. 2020) over OGB-style categorical atom and bond
features, mean-pooled to one prediction per graph, optionally with OGB's virtual node (gin-virtual): the
graph-classification net of the GNN workloads."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.graph.gin_config import Config
from suite.registry import Component


class FeatureEmbedding(nn.Module):
    """Sum of one embedding per categorical column (OGB's AtomEncoder / BondEncoder)."""

    def __init__(self, dims: list[int], d: int):
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(n, d) for n in dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.tables[0](x[:, 0])
        for k in range(1, len(self.tables)):
            out = out + self.tables[k](x[:, k])
        return out


class GINELayer(nn.Module):
    def __init__(self, d: int, bond_dims: list[int]):
        super().__init__()
        self.bond = FeatureEmbedding(bond_dims, d)
        self.eps = nn.Parameter(torch.zeros(1))
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.BatchNorm1d(2 * d), nn.ReLU(), nn.Linear(2 * d, d))

    def forward(self, h: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index
        msg = F.relu(h[src] + self.bond(edge_attr))
        agg = torch.zeros_like(h).index_add_(0, dst, msg)
        return self.mlp((1 + self.eps) * h + agg)


class GIN(nn.Module):
    def __init__(self, cfg: Config, atom_dims: list[int], bond_dims: list[int], n_out: int):
        super().__init__()
        d = cfg.d_model
        self.atom = FeatureEmbedding(atom_dims, d)
        self.layers = nn.ModuleList(GINELayer(d, bond_dims) for _ in range(cfg.n_layer))
        self.norms = nn.ModuleList(nn.BatchNorm1d(d) for _ in range(cfg.n_layer))
        self.head = nn.Linear(d, n_out)
        self.dropout = cfg.dropout
        self.pool = cfg.pool
        self.virtual: nn.Embedding | None = None
        if cfg.virtual_node:  # OGB GNN_node_Virtualnode: a zero-initialised embedding, an MLP per layer but the last
            self.virtual = nn.Embedding(1, d)
            nn.init.constant_(self.virtual.weight, 0.0)
            self.virtual_mlps = nn.ModuleList(
                nn.Sequential(nn.Linear(d, 2 * d), nn.BatchNorm1d(2 * d), nn.ReLU(), nn.Linear(2 * d, d),
                              nn.BatchNorm1d(d), nn.ReLU()) for _ in range(cfg.n_layer - 1))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        h = self.atom(batch["x"])
        g = int(batch["num_graphs"])
        vn = self.virtual.weight.expand(g, -1) if self.virtual is not None else None
        for i, (layer, norm) in enumerate(zip(self.layers, self.norms, strict=True)):
            if vn is not None:
                h = h + vn[batch["batch"]]  # message from the virtual node to its graph's nodes
            h_in = h
            h = norm(layer(h, batch["edge_index"], batch["edge_attr"]))
            if i < len(self.layers) - 1:
                h = F.relu(h)
            h = F.dropout(h, self.dropout, self.training)
            if vn is not None and i < len(self.layers) - 1:  # graph nodes -> virtual node (sum), then its MLP
                pooled_in = torch.zeros(g, h_in.shape[1], device=h.device, dtype=h_in.dtype)
                pooled_in = pooled_in.index_add_(0, batch["batch"], h_in)
                vn = F.dropout(self.virtual_mlps[i](pooled_in + vn), self.dropout, self.training)
        pooled = torch.zeros(g, h.shape[1], device=h.device, dtype=h.dtype).index_add_(0, batch["batch"], h)
        if self.pool == "mean":
            counts = torch.bincount(batch["batch"], minlength=g).clamp(min=1).to(h.dtype)
            pooled = pooled / counts[:, None]
        return self.head(pooled)


def n_outputs(meta: dict[str, Any]) -> int:
    return int(meta["num_tasks"] if meta.get("task_type") == "multilabel" else meta["num_classes"])


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    return GIN(cfg, list(meta["atom_feature_dims"]), list(meta["bond_feature_dims"]), n_outputs(meta))


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    """One sample = one graph of the training set's average size. Matmuls only (PaLM's convention): each
    layer's MLP is d->2d->d per node, 2*(2d^2 + 2d^2) = 8d^2 FLOPs; the head 2*d*out per graph. The
    scatter-add aggregation and embedding lookups are element-wise and not counted. 3x for fwd + bwd."""
    d, nodes = cfg.d_model, float(meta["avg_nodes"])
    fwd = cfg.n_layer * nodes * 8 * d * d + 2 * d * n_outputs(meta)
    if cfg.virtual_node:  # one virtual node per graph, an MLP d->2d->d between layers
        fwd += (cfg.n_layer - 1) * 8 * d * d
    return 3.0 * fwd


def flops_by_class(cfg: Config, meta: dict[str, Any]) -> dict[str, float]:
    """All model FLOPs are matmuls (suite/measure/op_dtypes.py picks their dtype's peak)."""
    return {"matmul": flops_per_sample(cfg, meta)}


COMPONENT = Component(Config, build=build, flops_per_sample=flops_per_sample, flops_by_class=flops_by_class)

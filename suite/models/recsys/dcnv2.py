"""DLRM-DCNv2 (Wang et al. 2021; MLPerf Training's `dlrm_dcnv2`, v3.0-v5.1): a bottom MLP over the dense features,
one embedding per categorical feature, their concatenation crossed by low-rank DCN-v2 layers
(x_{l+1} = x_0 * (W (V x_l) + b) + x_l, TorchRec's `LowRankCrossNet`), and a top MLP to one logit.

Presets: `full` is the MLPerf reference (mlcommons/training recommendation_v2/torchrec_dlrm, Criteo 1TB click logs:
`--embedding_dim 128 --dense_arch_layer_sizes 512,256,128 --over_arch_layer_sizes 1024,1024,512,256,1
--interaction_type dcn --dcn_num_layers 3 --dcn_low_rank_dim 512`); `cpu` and `tiny` are ours.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.recsys.dcnv2_config import Config
from suite.models.recsys.tables import EmbeddingTables, TableSpec
from suite.registry import Component


def mlp(widths: list[int], last_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class LowRankCrossNet(nn.Module):
    """DCN-v2's cross network with W = U V of rank r: parameters named and shaped as TorchRec's (`V_kernels[l]`
    [r, D], `W_kernels[l]` [D, r], `bias[l]` [D]), so its weights load into TorchRec's module unchanged."""

    def __init__(self, in_features: int, num_layers: int, low_rank: int):
        super().__init__()
        self.V_kernels = nn.ParameterList(
            nn.Parameter(nn.init.xavier_normal_(torch.empty(low_rank, in_features))) for _ in range(num_layers))
        self.W_kernels = nn.ParameterList(
            nn.Parameter(nn.init.xavier_normal_(torch.empty(in_features, low_rank))) for _ in range(num_layers))
        self.bias = nn.ParameterList(nn.Parameter(torch.zeros(in_features)) for _ in range(num_layers))

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        x = x0
        for v, w, b in zip(self.V_kernels, self.W_kernels, self.bias, strict=True):
            x = x0 * (F.linear(F.linear(x, v), w) + b) + x
        return x


class DCNv2(nn.Module):
    def __init__(self, cfg: Config, n_dense: int, sparse: list[TableSpec], multi: list[TableSpec]):
        super().__init__()
        self.sparse_names = [t.name for t in sparse]
        self.multi_names = [t.name for t in multi]
        self.tables = EmbeddingTables(sparse + multi)
        self.bottom = mlp([n_dense, *cfg.bottom_mlp], last_activation=True)
        width = cfg.embedding_dim * (1 + len(sparse) + len(multi))
        self.cross = LowRankCrossNet(width, cfg.cross_layers, cfg.low_rank)
        self.top = mlp([width, *cfg.top_mlp], last_activation=False)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits [B]. batch: dense [B, n_dense] float, sparse [B, n_sparse] ids, multi:<name> [B, k] ids."""
        parts = [self.bottom(batch["dense"])]
        sparse = batch["sparse"]
        parts += [self.tables.lookup(n, sparse[:, i]) for i, n in enumerate(self.sparse_names)]
        parts += [self.tables.pooled(n, batch[f"multi:{n}"]) for n in self.multi_names]
        return self.top(self.cross(torch.cat(parts, dim=1))).squeeze(-1)


def table_specs(cfg: Config, meta: dict[str, Any]) -> tuple[list[TableSpec], list[TableSpec]]:
    card = meta["cardinality"]
    sparse = [TableSpec(n, int(card[n]), cfg.embedding_dim) for n in meta["sparse_features"]]
    multi = [TableSpec(n, int(card[n]), cfg.embedding_dim) for n in meta.get("multi_features", [])]
    return sparse, multi


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    sparse, multi = table_specs(cfg, meta)
    return DCNv2(cfg, int(meta["n_dense"]), sparse, multi)


def forward_flops(cfg: Config, meta: dict[str, Any]) -> float:
    n_feat = 1 + len(meta["sparse_features"]) + len(meta.get("multi_features", []))
    width = cfg.embedding_dim * n_feat
    dims_b = [int(meta["n_dense"]), *cfg.bottom_mlp]
    dims_t = [width, *cfg.top_mlp]
    bottom = sum(2 * a * b for a, b in zip(dims_b[:-1], dims_b[1:], strict=True))
    cross = cfg.cross_layers * 2 * (2 * width * cfg.low_rank)
    top = sum(2 * a * b for a, b in zip(dims_t[:-1], dims_t[1:], strict=True))
    return float(bottom + cross + top)


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    """3x forward, less the gradient of the dense input features (data, not trained): the first bottom layer's
    backward computes its weight gradient only."""
    return 3.0 * forward_flops(cfg, meta) - 2.0 * int(meta["n_dense"]) * cfg.bottom_mlp[0]


def flops_by_class(cfg: Config, meta: dict[str, Any]) -> dict[str, float]:
    return {"matmul": flops_per_sample(cfg, meta)}


def bytes_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    """Embedding bytes one training sample moves (fp32): each looked-up row read forward, its gradient written,
    and the row read and written by the optimizer (4 passes); a multi-hot feature counts its ids (meta's mean)."""
    rows = len(meta["sparse_features"]) + sum(float(meta.get("multi_mean_ids", {}).get(n, 1.0))
                                              for n in meta.get("multi_features", []))
    return float(rows * cfg.embedding_dim * 4 * 4)


COMPONENT = Component(Config, build=build, flops_per_sample=flops_per_sample, flops_by_class=flops_by_class,
                      bytes_per_sample=bytes_per_sample)

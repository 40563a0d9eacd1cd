"""Graph containers: one graph with node labels (node classification) and many small graphs packed
CSR-style (graph classification), with the block-diagonal batching PyG uses, in plain torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch is imported where a tensor is made: `data list` (locate) needs none
    import torch


@dataclass
class NodeGraph:
    """One graph: node features, a symmetric edge list with weights, labels, fixed train/val node indices."""

    x: torch.Tensor  # N x F float
    edge_index: torch.Tensor  # 2 x E long
    edge_weight: torch.Tensor  # E float
    y: torch.Tensor  # N long
    train_idx: torch.Tensor
    val_idx: torch.Tensor
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class PackedGraphs:
    """G graphs in flat arrays: graph g owns nodes node_ptr[g]:node_ptr[g+1] and edges edge_ptr[g]:edge_ptr[g+1];
    edge_index holds node numbers local to their graph (OGB's raw layout)."""

    x: np.ndarray  # N_total x Fa int64 categorical atom features
    edge_index: np.ndarray  # 2 x E_total int64, local
    edge_attr: np.ndarray  # E_total x Fb int64 categorical bond features
    node_ptr: np.ndarray  # G+1
    edge_ptr: np.ndarray  # G+1
    y: np.ndarray  # G (class ids) or G x T (multi-task, NaN = unlabelled)

    def __len__(self) -> int:
        return int(self.node_ptr.shape[0] - 1)

    @staticmethod
    def from_lists(xs: list[np.ndarray], edges: list[np.ndarray], eattrs: list[np.ndarray], y: np.ndarray,
                   n_edge_feat: int = 1) -> PackedGraphs:
        node_ptr = np.concatenate([[0], np.cumsum([len(x) for x in xs])]).astype(np.int64)
        edge_ptr = np.concatenate([[0], np.cumsum([e.shape[1] for e in edges])]).astype(np.int64)
        return PackedGraphs(
            np.concatenate(xs).astype(np.int64),
            np.concatenate(edges, axis=1).astype(np.int64) if edges else np.zeros((2, 0), np.int64),
            np.concatenate(eattrs).reshape(-1, n_edge_feat).astype(np.int64),
            node_ptr, edge_ptr, y)

    def subset(self, idx: np.ndarray) -> PackedGraphs:
        b = self.batch(idx, as_tensors=False)
        return PackedGraphs(b["x"], b["local_edge_index"], b["edge_attr"], b["node_ptr"], b["edge_ptr"], b["y"])

    def batch(self, idx: np.ndarray, as_tensors: bool = True) -> dict[str, Any]:
        """Block-diagonal batch of graphs `idx`: edge indices shifted to the batch's node numbering."""
        import torch
        idx = np.asarray(idx, dtype=np.int64)
        n = self.node_ptr[idx + 1] - self.node_ptr[idx]
        m = self.edge_ptr[idx + 1] - self.edge_ptr[idx]
        node_sel = _ranges(self.node_ptr[idx], n)
        edge_sel = _ranges(self.edge_ptr[idx], m)
        new_node_ptr = np.concatenate([[0], np.cumsum(n)])
        new_edge_ptr = np.concatenate([[0], np.cumsum(m)])
        local = self.edge_index[:, edge_sel]
        shifted = local + np.repeat(new_node_ptr[:-1], m)[None, :]
        out = {
            "x": self.x[node_sel], "edge_index": shifted, "edge_attr": self.edge_attr[edge_sel],
            "batch": np.repeat(np.arange(idx.shape[0]), n), "y": self.y[idx],
            "node_ptr": new_node_ptr, "edge_ptr": new_edge_ptr, "local_edge_index": local,
        }
        if not as_tensors:
            return out
        t = {k: torch.from_numpy(np.ascontiguousarray(out[k])) for k in ("x", "edge_index", "edge_attr", "batch", "y")}
        t["num_graphs"] = torch.tensor(idx.shape[0])
        return t

    def stats(self) -> dict[str, float]:
        g = max(1, len(self))
        return {"avg_nodes": float(self.x.shape[0]) / g, "avg_edges": float(self.edge_index.shape[1]) / g}


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """concat(arange(s, s + l) for s, l): vectorised, since molpcba batches hold thousands of atoms."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(starts, lengths) + np.arange(total) - offsets


@dataclass
class GraphSplits:
    train: PackedGraphs
    val: PackedGraphs
    meta: dict[str, Any] = field(default_factory=dict)  # atom_feature_dims, bond_feature_dims, task_type, ...

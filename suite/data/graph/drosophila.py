"""The larval Drosophila mushroom-body connectome, left hemisphere (Eichler et al. 2017, via graspologic, MIT):
209 neurons, synapse counts between them, 4 cell types (K Kenyon, P projection, O output, I input).

Installed by `make data` from PyPI `graspologic` (--no-deps, only its CSVs are used) into
$TRAINBENCH_DATA/registry. The neurons have no features: a node is described by its log synapse counts to
and from every other neuron (its adjacency rows), the usual choice for a featureless graph.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from suite.data.base import DataMissing
from suite.data.graph.drosophila_config import Config
from suite.data.graph.graphs import NodeGraph
from suite.data.locate import find_dir, install_hint, link_local, named_dir, registry_dir
from suite.registry import Component

FILES = ("left_adjacency.csv", "left_cell_labels.csv")
CLASSES = ("K", "P", "O", "I")


def locate(cfg: Config) -> Path:
    pkg = registry_dir("graspologic") / "graspologic/datasets/drosophila"
    return find_dir("drosophila", [Path(cfg.path) if cfg.path else None, named_dir("drosophila"), pkg], FILES,
                    install_hint("drosophila"))


def stratified_split(y: np.ndarray, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Per class, a fixed share goes to validation: seeded by a constant, never by the run seed."""
    rng = np.random.default_rng(0)
    val = []
    for c in np.unique(y):
        members = np.nonzero(y == c)[0]
        rng.shuffle(members)
        val += list(members[: max(1, round(val_fraction * members.size))])
    val_idx = np.sort(np.array(val))
    train_idx = np.setdiff1d(np.arange(y.shape[0]), val_idx)
    return train_idx, val_idx


def load(cfg: Config) -> NodeGraph:
    import torch  # here, not at the top: `data list` imports this module for locate() and needs no torch

    folder = locate(cfg)
    adj = np.loadtxt(folder / FILES[0], dtype=np.float64)
    labels = (folder / FILES[1]).read_text().split()
    if adj.ndim != 2 or adj.shape[0] != adj.shape[1] or adj.shape[0] != len(labels):
        raise DataMissing(f"{folder}: adjacency {adj.shape} does not match {len(labels)} labels")
    unknown = sorted(set(labels) - set(CLASSES))
    if unknown:
        raise DataMissing(f"{folder}: unknown cell types {unknown} (expected {CLASSES})")
    y = np.array([CLASSES.index(s) for s in labels], dtype=np.int64)
    n = adj.shape[0]
    w = np.log1p(adj)
    if cfg.features == "adjacency":
        x = np.concatenate([w, w.T], axis=1)
        x = x / max(1e-9, x.max())
    else:
        x = np.eye(n)
    sym = np.maximum(w, w.T)  # GCN's propagation needs an undirected graph; synapse direction stays in x
    src, dst = np.nonzero(sym)
    train_idx, val_idx = stratified_split(y, cfg.val_fraction)
    return NodeGraph(
        torch.tensor(x, dtype=torch.float32), torch.tensor(np.stack([src, dst]), dtype=torch.long),
        torch.tensor(sym[src, dst], dtype=torch.float32), torch.from_numpy(y),
        torch.from_numpy(train_idx), torch.from_numpy(val_idx),
        meta={"num_features": x.shape[1], "num_classes": len(CLASSES), "num_nodes": n, "num_edges": len(src),
              "source": str(folder), "license": "MIT"},
    )


def prepare(source: Path | None) -> str:
    folder = locate(Config(path=str(source) if source else None))
    if source:
        link_local("drosophila", folder)
    g = load(Config(path=str(folder)))
    return f"drosophila: {folder} ({g.meta['num_nodes']} neurons, {g.meta['num_edges']} edges)"


COMPONENT = Component(Config, load=load, prepare=prepare)

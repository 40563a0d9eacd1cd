"""Transductive node classification on one graph: full-graph forward, cross-entropy on the training nodes,
accuracy on the fixed validation nodes. One harness step = one full-graph pass (data.batch_size: 1)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from suite.data.graph.graphs import NodeGraph
from suite.models.graph.gcn import normalized_adjacency
from suite.workloads.base import WorkloadBase
from suite.workloads.checks import NodeClassificationChecks
from suite.workloads.contract import Batch, Context


class NodeClassification(NodeClassificationChecks, WorkloadBase):
    def __init__(self, spec, ctx: Context):
        super().__init__(spec, ctx)
        if spec.data.batch_size != 1:
            raise ValueError("task node_classification: data.batch_size must be 1 (a step is one full-graph pass)")
        g: NodeGraph = self.data_component.load(self.data_cfg)
        self.meta = g.meta
        dev = ctx.device
        self.x, self.y = g.x.to(dev), g.y.to(dev)
        self.adj = normalized_adjacency(g.edge_index, g.edge_weight, g.x.shape[0]).to(dev)
        self.train_idx, self.val_idx = g.train_idx.to(dev), g.val_idx.to(dev)

    def build_model(self) -> nn.Module:
        return self.model_component.build(self.model_cfg, self.meta)

    def train_batches(self, rank: int, world: int) -> Iterator[Batch]:
        # each rank owns a fixed slice of the training nodes; DDP's gradient mean makes the sum the full loss
        mine = self.train_idx[rank::world]
        if mine.numel() == 0:
            raise ValueError(f"{world} ranks but only {self.train_idx.numel()} training nodes")
        while True:
            yield mine

    def batch_samples(self, batch: Batch) -> int:
        return 1

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        logits = model(self.x, self.adj)
        return F.cross_entropy(logits[batch], self.y[batch])

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        was_training = model.training
        model.eval()
        logits = model(self.x, self.adj).float()
        model.train(was_training)
        v = self.val_idx
        return {
            "accuracy": float((logits[v].argmax(1) == self.y[v]).float().mean()),
            "loss": float(F.cross_entropy(logits[v], self.y[v])),
            "train_accuracy": float((logits[self.train_idx].argmax(1) == self.y[self.train_idx]).float().mean()),
        }

    def flops_per_sample(self) -> float:
        return float(self.model_component.flops_per_sample(self.model_cfg, self.meta))

"""Graph-level prediction over mini-batches of small graphs: multi-class (accuracy) or multi-task binary with
missing labels (masked BCE; mean average precision over tasks, as OGB's Evaluator computes it)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from suite.data.graph.graphs import GraphSplits, PackedGraphs
from suite.workloads.base import WorkloadBase
from suite.workloads.checks import GraphClassificationChecks
from suite.workloads.contract import Batch, Context


def graph_batches(graphs: PackedGraphs, local_bs: int, rank: int, world: int, seed: int) -> Iterator[Batch]:
    """Endless shuffled epochs; the permutation depends on (seed, epoch) only, rank r takes the r-th slice."""
    n, global_bs = len(graphs), local_bs * world
    steps = n // global_bs
    if steps == 0:
        raise ValueError(f"data.batch_size {global_bs} is larger than the training set ({n} graphs)")
    epoch = 0
    while True:
        perm = np.random.default_rng([seed, epoch]).permutation(n)
        for i in range(steps):
            yield graphs.batch(perm[i * global_bs + rank * local_bs : i * global_bs + (rank + 1) * local_bs])
        epoch += 1


def mean_average_precision(y_true: np.ndarray, y_score: np.ndarray) -> float:
    """OGB's rocauc/ap evaluator for molpcba: per task, AP over labelled graphs, for tasks that have both a
    positive and a negative label; the mean over those tasks."""
    # imported here: sklearn.metrics (with scipy) is ~1 s of CPU that every driver and the fork server would
    # otherwise pay for this one workload's evaluation (issue 29: smoke tier start-up)
    from sklearn.metrics import average_precision_score

    aps = []
    for t in range(y_true.shape[1]):
        mask = ~np.isnan(y_true[:, t])
        yt = y_true[mask, t]
        if yt.size and yt.max() > 0 and yt.min() == 0:
            aps.append(average_precision_score(yt, y_score[mask, t]))
    if not aps:
        raise ValueError("no task has both a positive and a negative label in the evaluation set")
    return float(np.mean(aps))


class GraphClassification(GraphClassificationChecks, WorkloadBase):
    def __init__(self, spec, ctx: Context):
        super().__init__(spec, ctx)
        self.splits: GraphSplits = self.data_component.load(self.data_cfg)
        self.meta = self.splits.meta
        self.check_batch_fits(len(self.splits.train), "graphs")
        self.multilabel = self.meta.get("task_type") == "multilabel"
        val = self.splits.val
        n_val = min(len(val), spec.eval.subset) if spec.eval.subset else len(val)
        bs = spec.data.eval_batch_size or 1024
        # evaluation batches are built once: the same graphs, in the same order, for every run
        self.val_batches = [
            {k: v.to(ctx.device) for k, v in val.batch(np.arange(i, min(i + bs, n_val))).items()}
            for i in range(0, n_val, bs)
        ]

    def build_model(self) -> nn.Module:
        return self.model_component.build(self.model_cfg, self.meta)

    def train_batches(self, rank: int, world: int) -> Iterator[Batch]:
        return graph_batches(self.splits.train, self.local_batch_size(world), rank, world, self.ctx.seed)

    def batch_samples(self, batch: Batch) -> int:
        return int(batch["num_graphs"])

    def _loss(self, logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        if not self.multilabel:
            return F.cross_entropy(logits, y, reduction=reduction)
        mask = ~torch.isnan(y)
        losses = F.binary_cross_entropy_with_logits(logits[mask], y[mask], reduction=reduction)
        return losses

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return self._loss(model(batch).float(), batch["y"])

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        was_training = model.training
        model.eval()
        scores, labels = [], []
        for b in self.val_batches:
            scores.append(model(b).float())
            labels.append(b["y"])
        model.train(was_training)
        logits, y = torch.cat(scores), torch.cat(labels)
        if self.multilabel:
            return {"ap": mean_average_precision(y.cpu().numpy(), logits.cpu().numpy()),
                    "loss": float(self._loss(logits, y))}
        return {"accuracy": float((logits.argmax(1) == y).float().mean()), "loss": float(self._loss(logits, y))}

    def flops_per_sample(self) -> float:
        return float(self.model_component.flops_per_sample(self.model_cfg, self.meta))

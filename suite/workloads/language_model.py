"""Causal language modelling: next-token cross-entropy on random windows; validation loss in nats/token."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from suite.data.text import TokenSplits
from suite.workloads.base import Batch, Context, WorkloadBase


def window_batches(
    shards: list[np.ndarray], seq_len: int, local_bs: int, rank: int, world: int, seed: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless batches of (x, y) windows drawn uniformly over all tokens (nanoGPT's get_batch).

    Each rank draws from its own stream, seeded by (seed, rank), so ranks never repeat each other's windows
    and a run is reproducible for a given seed and world size.
    """
    lengths = np.array([a.shape[0] - seq_len - 1 for a in shards])
    if (lengths <= 0).all():
        raise ValueError(f"every token shard is shorter than seq_len + 1 = {seq_len + 1}")
    weights = np.clip(lengths, 0, None) / np.clip(lengths, 0, None).sum()
    rng = np.random.default_rng([seed, rank, world])
    ar = np.arange(seq_len + 1)
    while True:
        which = rng.choice(len(shards), size=local_bs, p=weights)
        rows = np.empty((local_bs, seq_len + 1), dtype=np.int64)
        for s in np.unique(which):
            sel = np.nonzero(which == s)[0]
            starts = rng.integers(0, lengths[s] + 1, size=sel.size)
            rows[sel] = shards[s][starts[:, None] + ar]
        t = torch.from_numpy(rows)
        yield t[:, :-1], t[:, 1:]


def val_windows(shards: list[np.ndarray], seq_len: int, limit: int | None) -> torch.Tensor:
    """Non-overlapping windows from the start of each validation shard: the same set for every run."""
    rows = []
    for a in shards:
        n = (a.shape[0] - 1) // seq_len
        for i in range(n):
            rows.append(np.asarray(a[i * seq_len : i * seq_len + seq_len + 1], dtype=np.int64))
            if limit and len(rows) >= limit:
                return torch.from_numpy(np.stack(rows))
    if not rows:
        raise ValueError(f"the validation split is shorter than seq_len + 1 = {seq_len + 1} tokens")
    return torch.from_numpy(np.stack(rows))


class LanguageModel(WorkloadBase):
    def __init__(self, spec, ctx: Context):
        super().__init__(spec, ctx)
        self.splits: TokenSplits = self.data_component.load(self.data_cfg)
        self.meta = self.splits.meta
        seq_len = getattr(self.model_cfg, "seq_len", None)
        if not seq_len:
            raise ValueError(f"task language_model needs a model with seq_len (model.arch {spec.model.arch!r})")
        self.seq_len = int(seq_len)
        vocab = getattr(self.model_cfg, "vocab_size", None) or self.meta.get("vocab_size")
        self.val = val_windows(self.splits.val, self.seq_len, spec.eval.subset).to(ctx.device)
        if vocab and int(self.val.max()) >= int(vocab):
            raise ValueError(f"token id {int(self.val.max())} in the validation data >= vocab_size {vocab}")

    def build_model(self) -> nn.Module:
        return self.model_component.build(self.model_cfg, self.meta)

    def train_batches(self, rank: int, world: int) -> Iterator[Batch]:
        return window_batches(self.splits.train, self.seq_len, self.local_batch_size(world), rank, world,
                              self.ctx.seed)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        was_training = model.training
        model.eval()
        bs = self.spec.data.eval_batch_size or self.spec.data.batch_size
        total, count = 0.0, 0
        for i in range(0, self.val.shape[0], bs):
            rows = self.val[i : i + bs]
            logits = model(rows[:, :-1]).float()
            total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1),
                                           reduction="sum"))
            count += rows[:, 1:].numel()
        model.train(was_training)
        loss = total / count
        return {"val_loss": loss, "bits_per_token": loss / float(np.log(2))}

    def tokens_per_sample(self) -> int:
        return self.seq_len

    def flops_per_sample(self) -> float:
        return float(self.model_component.flops_per_sample(self.model_cfg, self.meta))

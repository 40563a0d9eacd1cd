"""Causal language modelling: next-token cross-entropy on token windows (drawn at random, or llm.c's epochs of
shuffled non-overlapping windows); validation loss in nats/token."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from suite.data.text.streams import TokenSplits
from suite.workloads.base import WorkloadBase
from suite.workloads.checks import LanguageModelChecks
from suite.workloads.contract import Batch, Context


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


def epoch_batches(
    shards: list[np.ndarray], seq_len: int, local_bs: int, rank: int, world: int, seed: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """llm.c's training loader (llmc/dataloader.h, `should_shuffle`): each epoch visits the shards in a seeded
    permutation and, inside each, every non-overlapping window of seq_len + 1 tokens once, in a seeded
    permutation; no window repeats within an epoch. Draws depend on (seed, epoch) only, identical on every
    rank; rank r takes the r-th slice of each global batch, so N ranks see what one process would."""
    counts = [(a.shape[0] - 1) // seq_len for a in shards]
    global_bs = local_bs * world
    if sum(counts) < global_bs:
        raise ValueError(f"the training shards hold {sum(counts)} windows of {seq_len + 1} tokens, fewer than "
                         f"one batch ({global_bs})")
    ar = np.arange(seq_len + 1)
    epoch = 0
    pending: list[tuple[int, np.ndarray]] = []  # (shard, window starts) carried over a shard's end
    while True:
        rng = np.random.default_rng([seed, epoch, 0x11C])
        for s in rng.permutation(len(shards)):
            starts = rng.permutation(counts[s]) * seq_len
            pending.append((int(s), starts))
            while sum(len(st) for _, st in pending) >= global_bs:
                take, need = [], global_bs
                while need:
                    shard, st = pending[0]
                    take.append((shard, st[:need]))
                    need -= len(st[:need])
                    if len(st) <= len(take[-1][1]):
                        pending.pop(0)
                    else:
                        pending[0] = (shard, st[len(take[-1][1]):])
                rows = np.concatenate([shards[sh][st[:, None] + ar] for sh, st in take if len(st)]).astype(np.int64)
                t = torch.from_numpy(rows[rank * local_bs : (rank + 1) * local_bs])
                yield t[:, :-1], t[:, 1:]
        epoch += 1


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


class LanguageModel(LanguageModelChecks, WorkloadBase):
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
        if self.meta.get("order") == "epochs":
            return epoch_batches(self.splits.train, self.seq_len, self.local_batch_size(world), rank, world,
                                 self.ctx.seed)
        return window_batches(self.splits.train, self.seq_len, self.local_batch_size(world), rank, world,
                              self.ctx.seed)

    def _real_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits over the tokenizer's vocabulary only: a vocabulary padded for speed (50304 for GPT-2's 50257)
        adds columns no token uses, which llm.c leaves out of the softmax (its fused classifier reads V of Vp)."""
        v = self.meta.get("vocab_size")
        return logits[..., :v] if v and logits.shape[-1] > int(v) else logits

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        logits = self._real_vocab(model(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        was_training = model.training
        model.eval()
        bs = self.spec.data.eval_batch_size or self.spec.data.batch_size
        total, count = 0.0, 0
        for i in range(0, self.val.shape[0], bs):
            rows = self.val[i : i + bs]
            logits = self._real_vocab(model(rows[:, :-1])).float()
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

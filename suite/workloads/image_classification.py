"""Image classification: cross-entropy training, top-1 accuracy on the held-out split."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from suite.algorithms import losses
from suite.data.base import TensorSplits
from suite.workloads.base import WorkloadBase
from suite.workloads.checks import ImageClassificationChecks
from suite.workloads.contract import Batch, Context


def shard_batches(
    x: torch.Tensor, y: torch.Tensor, local_bs: int, rank: int, world: int, seed: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless epochs of shuffled batches from in-memory tensors; rank r takes the r-th slice of each batch.

    The permutation is drawn from a generator seeded by (seed, epoch), identical on every rank, so the
    ranks together see exactly the global batch a single process would.
    """
    n = x.shape[0]
    global_bs = local_bs * world
    steps_per_epoch = n // global_bs
    if steps_per_epoch == 0:
        raise ValueError(f"data.batch_size {global_bs} is larger than the training set ({n} samples)")
    epoch = 0
    while True:
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        perm = torch.randperm(n, generator=g).to(x.device)
        for i in range(steps_per_epoch):
            idx = perm[i * global_bs + rank * local_bs : i * global_bs + (rank + 1) * local_bs]
            yield x[idx], y[idx]
        epoch += 1


def translate(images: torch.Tensor, pad: int, g: torch.Generator) -> torch.Tensor:
    """airbench94 `batch_crop` (lines 76-94): each image shifted by (dy, dx) in [-pad, pad] from a reflect-padded
    copy (`images` is that copy, 2 * pad larger)."""
    size = images.shape[-1] - 2 * pad
    shifts = torch.randint(-pad, pad + 1, (len(images), 2), generator=g).to(images.device)
    out = torch.empty((len(images), images.shape[1], size, size), device=images.device, dtype=images.dtype)
    for sy in range(-pad, pad + 1):
        for sx in range(-pad, pad + 1):
            mask = (shifts[:, 0] == sy) & (shifts[:, 1] == sx)
            out[mask] = images[mask, :, pad + sy : pad + sy + size, pad + sx : pad + sx + size]
    return out


def airbench_batches(x: torch.Tensor, y: torch.Tensor, local_bs: int, rank: int, world: int, seed: int,
                     flip: bool, pad: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """airbench94's CifarLoader (lines 126-154): images mirrored at random once (epoch 0), then every image
    mirrored in odd epochs; a fresh random translation each epoch; a fresh permutation; the last partial batch
    dropped. Draws come from (seed, epoch), the same on every rank; rank r takes the r-th slice of each batch."""
    n, global_bs = x.shape[0], local_bs * world
    if n // global_bs == 0:
        raise ValueError(f"data.batch_size {global_bs} is larger than the training set ({n} samples)")
    g0 = torch.Generator().manual_seed(seed * 100_003 - 1)
    base = x
    if flip:
        mask = (torch.rand(n, generator=g0) < 0.5).view(-1, 1, 1, 1).to(x.device)
        base = torch.where(mask, x.flip(-1), x)
    padded = F.pad(base, (pad,) * 4, "reflect") if pad else base
    epoch = 0
    while True:
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        images = translate(padded, pad, g) if pad else base
        if flip and epoch % 2 == 1:
            images = images.flip(-1)
        perm = torch.randperm(n, generator=g).to(x.device)
        for i in range(n // global_bs):
            idx = perm[i * global_bs + rank * local_bs : i * global_bs + (rank + 1) * local_bs]
            yield images[idx], y[idx]
        epoch += 1


class ImageClassification(ImageClassificationChecks, WorkloadBase):
    def __init__(self, spec, ctx: Context):
        super().__init__(spec, ctx)
        self.loss_fn = losses.build(spec.loss)
        splits: TensorSplits = self.data_component.load(self.data_cfg)
        self.meta = splits.meta
        self.check_batch_fits(len(splits.train_x))
        self.splits = splits.to(ctx.device)
        subset = spec.eval.subset
        self.val_x = self.splits.val_x[:subset] if subset else self.splits.val_x
        self.val_y = self.splits.val_y[:subset] if subset else self.splits.val_y

    def build_model(self) -> nn.Module:
        model = self.model_component.build(self.model_cfg, self.meta)
        init = getattr(model, "init_from_data", None)  # a data-dependent init (airbench's whitening conv)
        if init is not None:
            init(self.splits.train_x)
        return model

    def train_batches(self, rank: int, world: int) -> Iterator[Batch]:
        aug = self.meta.get("augment") or {}
        if aug.get("flip") or aug.get("translate"):
            return airbench_batches(self.splits.train_x, self.splits.train_y, self.local_batch_size(world), rank,
                                    world, self.ctx.seed, bool(aug.get("flip")), int(aug.get("translate", 0)))
        return shard_batches(
            self.splits.train_x, self.splits.train_y, self.local_batch_size(world), rank, world, self.ctx.seed
        )

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        return self.loss_fn(model(x), y)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        was_training = model.training
        model.eval()
        bs = self.spec.data.eval_batch_size or 1024
        correct, total_loss = 0, 0.0
        for i in range(0, self.val_x.shape[0], bs):
            x, y = self.val_x[i : i + bs], self.val_y[i : i + bs]
            logits = model(x).float()
            total_loss += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(dim=1) == y).sum())
        model.train(was_training)
        n = self.val_x.shape[0]
        return {"accuracy": correct / n, "loss": total_loss / n}

    def flops_per_sample(self) -> float:
        return float(self.model_component.flops_per_sample(self.model_cfg, self.meta))

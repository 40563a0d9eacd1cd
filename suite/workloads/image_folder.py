"""Image classification streamed from files (ImageNet): DataLoader workers decode and augment with Pillow, or
(data.decode) only read the bytes for the device to decode (suite/data/vision/imagenet_device.py), or one NVIDIA DALI
pipeline per rank reads, decodes and augments (suite/data/vision/imagenet_dali.py); each rank reads its slice of a
per-epoch permutation that depends on (seed, epoch) only (DALI: its shard, reshuffled each epoch); top-1 on the
val images."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Sampler

from suite.algorithms import losses
from suite.data.base import DataMissing
from suite.data.vision import imagenet_dali
from suite.data.vision import imagenet_device as device_decode
from suite.data.vision.imagenet import ImageDataset, ImageFolderSplits
from suite.data.vision.imagenet_config import dali_missing
from suite.workloads.base import WorkloadBase
from suite.workloads.checks import ImageFolderClassificationChecks
from suite.workloads.contract import Batch, Context


class EndlessShardSampler(Sampler[list[int]]):
    """Batches of indices, epoch after epoch, rank r taking the r-th slice of every global batch."""

    def __init__(self, n: int, local_bs: int, rank: int, world: int, seed: int):
        self.n, self.local_bs, self.rank, self.world, self.seed = n, local_bs, rank, world, seed
        if n < local_bs * world:
            raise ValueError(f"data.batch_size {local_bs * world} is larger than the training set ({n} images)")

    def __iter__(self) -> Iterator[list[int]]:
        gbs, epoch = self.local_bs * self.world, 0
        while True:
            perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            for i in range(self.n // gbs):
                lo = i * gbs + self.rank * self.local_bs
                yield perm[lo : lo + self.local_bs].tolist()
            epoch += 1

    def __len__(self) -> int:  # endless; DataLoader only asks for len() when it is used
        return 2**62


class ImageFolderClassification(ImageFolderClassificationChecks, WorkloadBase):
    def __init__(self, spec, ctx: Context):
        super().__init__(spec, ctx)
        self.loss_fn = losses.build(spec.loss)
        self.splits: ImageFolderSplits = self.data_component.load(self.data_cfg)
        self.meta = self.splits.meta
        self.check_batch_fits(len(self.splits.train), "images")
        if spec.eval.subset:
            self.splits.val = self.splits.val[: spec.eval.subset]
        self._mode: str | None = None
        self._dali_val: Any = None  # DALI's val iterator, kept between evaluations (it resets after each pass)

    def build_model(self) -> nn.Module:
        return self.model_component.build(self.model_cfg, self.meta)

    def decode_mode(self) -> str:
        """Where images are decoded: `data.decode`; auto = DALI on CUDA when it imports, else torchvision (nvJPEG)
        on CUDA where installed, else Pillow."""
        if self._mode is None:
            self._mode = self._choose_mode()
        return self._mode

    def _choose_mode(self) -> str:
        mode, cuda = self.splits.cfg.decode, self.device.type == "cuda"
        if mode == "auto":
            if cuda and dali_missing() is None:
                return "dali"
            return "torchvision" if cuda and device_decode.torchvision_available() else "pillow"
        if mode == "torchvision" and not device_decode.torchvision_available():
            raise DataMissing("data.decode: torchvision needs the torchvision package (pip install torchvision, "
                              "the build that matches your torch)")
        if mode == "dali" and (reason := dali_missing()):
            raise DataMissing(f"data.decode: dali: {reason}")
        return mode

    def data_pipeline(self) -> dict[str, Any]:
        """What the result records of the input pipeline: the decoder that ran and where."""
        mode = self.decode_mode()
        where = {"pillow": "cpu", "torchvision": self.device.type,
                 "dali": "mixed" if self.device.type == "cuda" else "cpu"}[mode]
        out: dict[str, Any] = {"decoder": mode, "requested": self.splits.cfg.decode, "decode_device": where}
        if mode == "dali":
            out["dali_version"] = imagenet_dali.version()
        return out

    def _dali(self, train: bool, batch_size: int, rank: int = 0, world: int = 1) -> Any:
        pipe = imagenet_dali.pipeline(self.splits, train, batch_size, shard_id=rank, num_shards=world,
                                      seed=self.ctx.seed, device_id=imagenet_dali.device_id(self.device),
                                      num_threads=max(1, self.splits.cfg.num_workers))
        return imagenet_dali.iterator(pipe, train)

    def _loader(self, ds: Any, **kw) -> DataLoader:
        workers = self.splits.cfg.num_workers
        return DataLoader(ds, num_workers=workers, pin_memory=self.device.type == "cuda",
                          persistent_workers=workers > 0, **kw)

    def _device_stream(self, train: bool, decoder: device_decode.Decoder | None = None, **kw) -> Iterator[Batch]:
        cfg = self.splits.cfg
        loader = self._loader(device_decode.EncodedDataset(self.splits, train), collate_fn=device_decode.collate,
                              **kw)
        return device_decode.device_batches(
            loader, decoder or device_decode.torchvision_decoder(self.device), self.device, train, cfg.image_size,
            cfg.min_crop_scale, cfg.eval_resize or round(cfg.image_size * 256 / 224), self.ctx.seed)

    def train_batches(self, rank: int, world: int) -> Iterator[Batch]:
        sampler = EndlessShardSampler(len(self.splits.train), self.local_batch_size(world), rank, world,
                                      self.ctx.seed)
        if self.decode_mode() == "dali":
            return imagenet_dali.endless(self._dali(True, sampler.local_bs, rank, world))
        if self.decode_mode() == "torchvision":
            return self._device_stream(True, batch_sampler=sampler)
        return iter(self._loader(ImageDataset(self.splits, train=True), batch_sampler=sampler))

    def _eval_batches(self, bs: int) -> Iterator[Batch]:
        if self.decode_mode() == "dali":
            if self._dali_val is None or self._dali_val[0] != bs:
                self._dali_val = (bs, self._dali(False, bs))
            return imagenet_dali.one_pass(self._dali_val[1])
        if self.decode_mode() == "torchvision":
            return self._device_stream(False, batch_size=bs, shuffle=False)
        return iter(self._loader(ImageDataset(self.splits, train=False), batch_size=bs, shuffle=False))

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        return self.loss_fn(model(x), y)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        was_training = model.training
        model.eval()
        bs = self.spec.data.eval_batch_size or self.spec.data.batch_size
        correct = top5 = 0
        total_loss, n = 0.0, 0
        for x, y in self._eval_batches(bs):
            x, y = x.to(self.device), y.to(self.device)
            logits = model(x).float()
            total_loss += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(1) == y).sum())
            k = min(5, logits.shape[1])
            top5 += int((logits.topk(k, dim=1).indices == y[:, None]).any(1).sum())
            n += y.shape[0]
        model.train(was_training)
        return {"accuracy": correct / n, "top5": top5 / n, "loss": total_loss / n}

    def flops_per_sample(self) -> float:
        return float(self.model_component.flops_per_sample(self.model_cfg, self.meta))

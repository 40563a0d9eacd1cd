"""ImageNet through NVIDIA DALI (`pip install 'trainbench-suite[dali]'`, import-guarded): file reading, decoding,
MLPerf ResNet-50 v1.5 augmentation and normalisation in one DALI pipeline per rank.

With a CUDA device the JPEGs are decoded by nvJPEG ("mixed": Huffman on the CPU, the rest on the GPU) and the
crop, resize, flip and normalise run on the GPU; without one the same graph runs on DALI's CPU backend (which
is how the tests check it on a GPU-less machine). The preprocessing is the other paths' (suite/data/vision/imagenet.py):
  train: random-resized crop (area [min_crop_scale, 1], aspect [3/4, 4/3], 10 tries, then DALI takes the whole
         image where the others take the centred square), fused with the decode; bilinear (antialiased) resize to
         image_size, horizontal flip with p=0.5, mean/std normalisation (DALI's own RNG, seeded per run and rank);
  val:   bilinear resize of the short side to eval_resize (the long side rounded half up, the others' Python
         round goes half to even: they differ only at an exact .5), the centre crop at the others' floor offset,
         mean/std normalisation: within one grey level of the Pillow path.
Each data-parallel rank reads its own shard of the file list (DALI's shard_id / num_shards), reshuffled every
epoch with the same seed on every rank, so the shards of one epoch are disjoint; a shard's remainder that does
not fill a batch is dropped, as the other paths' sampler drops the global remainder. Validation reads every
image once, in index order, on every rank (as the other paths do)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from suite.data.base import DataMissing
from suite.data.vision.imagenet import MEAN, STD, ImageFolderSplits
from suite.data.vision.imagenet_config import dali_missing

NUM_ATTEMPTS = 10  # torchvision's RandomResizedCrop tries 10 boxes, as the Pillow and torchvision paths do


def version() -> str | None:
    try:
        import nvidia.dali

        return str(nvidia.dali.__version__)
    except Exception:  # noqa: BLE001
        return None


def device_id(device: torch.device) -> int | None:
    """DALI's device_id: the CUDA ordinal, or None for the CPU backend."""
    if device.type != "cuda":
        return None
    return device.index if device.index is not None else torch.cuda.current_device()


def pipeline(splits: ImageFolderSplits, train: bool, batch_size: int, *, shard_id: int = 0, num_shards: int = 1,
             seed: int = 0, device_id: int | None = None, num_threads: int = 1) -> Any:
    """The built DALI pipeline of one rank: outputs (images float32 NCHW, labels int64)."""
    if reason := dali_missing():
        raise DataMissing(f"data.decode: dali: {reason}")
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali import math as dmath

    cfg = splits.cfg
    items = splits.train if train else splits.val
    files = [str(splits.root / rel) for rel, _ in items]
    labels = [int(y) for _, y in items]
    size = cfg.image_size
    resize = cfg.eval_resize or round(size * 256 / 224)
    decode_on = "mixed" if device_id is not None else "cpu"
    linear = types.INTERP_LINEAR

    # the reader's shuffle seed is the run's on every rank (disjoint shards); augmentation differs per rank
    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id,
                  seed=seed * 1009 + shard_id, prefetch_queue_depth=2)
    def graph() -> Any:
        jpegs, y = fn.readers.file(files=files, labels=labels, shard_id=shard_id, num_shards=num_shards,
                                   shuffle_after_epoch=train, seed=seed, pad_last_batch=not train, name="reader")
        if train:
            img = fn.decoders.image_random_crop(jpegs, device=decode_on, output_type=types.RGB,
                                                random_area=(cfg.min_crop_scale, 1.0),
                                                random_aspect_ratio=(3 / 4, 4 / 3), num_attempts=NUM_ATTEMPTS)
            img = fn.resize(img, resize_x=size, resize_y=size, interp_type=linear, antialias=True)
            mirror = fn.random.coin_flip(probability=0.5)
            pos: dict[str, Any] = {}
        else:
            # the other paths' geometry exactly: short side to `resize`, the long side rounded, floor-centred crop
            hwc = fn.peek_image_shape(jpegs)
            h, w = fn.cast(hwc[0], dtype=types.FLOAT), fn.cast(hwc[1], dtype=types.FLOAT)
            scale = resize / dmath.min(h, w)
            nh = dmath.max(float(size), dmath.floor(h * scale + 0.5))
            nw = dmath.max(float(size), dmath.floor(w * scale + 0.5))
            img = fn.decoders.image(jpegs, device=decode_on, output_type=types.RGB)
            img = fn.resize(img, resize_x=nw, resize_y=nh, interp_type=linear, antialias=True)
            mirror = 0
            pos = {"crop_pos_x": dmath.floor((nw - size) / 2) / dmath.max(nw - size, 1.0),
                   "crop_pos_y": dmath.floor((nh - size) / 2) / dmath.max(nh - size, 1.0)}
        img = fn.crop_mirror_normalize(img, dtype=types.FLOAT, output_layout="CHW", crop=(size, size),
                                       mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD], mirror=mirror,
                                       **pos)
        return img, fn.cast(y, dtype=types.INT64)

    pipe = graph()
    pipe.build()
    return pipe


def iterator(pipe: Any, train: bool) -> Any:
    """DALI's torch iterator over one epoch of the pipeline (it resets itself at the end, for the next pass);
    train drops a last partial batch, val keeps it (every image once)."""
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    policy = LastBatchPolicy.DROP if train else LastBatchPolicy.PARTIAL
    return DALIGenericIterator(pipe, ["x", "y"], reader_name="reader", last_batch_policy=policy, auto_reset=True)


def one_pass(it: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(images, labels) torch tensors where the pipeline put them (the GPU for "mixed"), one epoch."""
    for out in it:
        yield out[0]["x"], out[0]["y"].view(-1)


def endless(it: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    while True:
        yield from one_pass(it)

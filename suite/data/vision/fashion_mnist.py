"""Fashion-MNIST (Zalando, MIT): 60k/10k 28x28 grey images, 10 classes, read from the IDX files.

Installed by `make data` from Debian's `dataset-fashion-mnist` into $TRAINBENCH_DATA/registry, or found at
the package's own place (/usr/share/datasets/fashion-mnist) when the system has it. The validation split
is the official 10k test set, so the target is a test accuracy.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from suite.data.base import DataMissing, TensorSplits
from suite.data.locate import find_dir, install_hint, link_local, named_dir, registry_dir
from suite.data.vision.fashion_mnist_config import Config
from suite.registry import Component

if TYPE_CHECKING:  # torch is imported where a tensor is made: `data list` (locate) needs none
    import torch

FILES = {
    "train_x": "train-images-idx3-ubyte.gz", "train_y": "train-labels-idx1-ubyte.gz",
    "val_x": "t10k-images-idx3-ubyte.gz", "val_y": "t10k-labels-idx1-ubyte.gz",
}
SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
# Fashion-MNIST training-set statistics (per pixel, scaled to [0, 1])
MEAN, STD = 0.2860, 0.3530


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (LeCun's MNIST format): magic 0x0000 0x08 ndim, big-endian int32 dims, then uint8 data."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0:2] != b"\x00\x00" or data[2] != 0x08:
        raise DataMissing(f"{path}: not an unsigned-byte IDX file (bad magic {data[:4]!r})")
    ndim = data[3]
    dims = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    expected = int(np.prod(dims))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != expected:
        raise DataMissing(f"{path}: IDX header says {dims} ({expected} bytes) but the body has {body.size}")
    return body.reshape(dims)


def locate(cfg: Config) -> Path:
    pkg = registry_dir("dataset-fashion-mnist") / "usr/share/datasets/fashion-mnist"
    return find_dir("fashion_mnist", [Path(cfg.path) if cfg.path else None, named_dir("fashion_mnist"), pkg, SYSTEM_DIR],
                    FILES.values(), install_hint("fashion_mnist"))


def load(cfg: Config) -> TensorSplits:
    import torch
    folder = locate(cfg)
    arrays = {k: read_idx(folder / f) for k, f in FILES.items()}
    for split in ("train", "val"):
        if arrays[f"{split}_x"].shape[0] != arrays[f"{split}_y"].shape[0]:
            raise DataMissing(f"{folder}: {split} images and labels differ in count")

    def images(a: np.ndarray, limit: int | None) -> torch.Tensor:
        a = a[:limit] if limit else a
        return ((torch.from_numpy(a.astype(np.float32)) / 255.0 - MEAN) / STD).unsqueeze(1)

    def labels(a: np.ndarray, limit: int | None) -> torch.Tensor:
        return torch.from_numpy((a[:limit] if limit else a).astype(np.int64))

    return TensorSplits(
        images(arrays["train_x"], cfg.train_limit), labels(arrays["train_y"], cfg.train_limit),
        images(arrays["val_x"], cfg.val_limit), labels(arrays["val_y"], cfg.val_limit),
        meta={"input_shape": (1, 28, 28), "num_classes": 10, "source": str(folder), "license": "MIT"},
    )


def prepare(source: Path | None) -> str:
    folder = locate(Config(path=str(source) if source else None))
    n = {k: read_idx(folder / f).shape[0] for k, f in FILES.items()}
    if source:
        folder = link_local("fashion_mnist", folder)
    return f"fashion_mnist: {folder} ({n['train_x']} train, {n['val_x']} test images)"


COMPONENT = Component(Config, load=load, prepare=prepare)

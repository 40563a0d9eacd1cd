"""CIFAR-10 (Krizhevsky 2009): 50k/10k 32x32 colour images, 10 classes, from the python pickle batches.

On-disk format (cifar-10-python.tar.gz, extracted): `cifar-10-batches-py/data_batch_1..5` and `test_batch`,
each a pickled dict with b"data" (N x 3072 uint8, channel-major R then G then B, row-major 32x32) and
b"labels" (N ints), plus `batches.meta`. Not on any package registry: `trainbench data prepare cifar10`.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from suite.data.base import DataMissing, TensorSplits
from suite.data.locate import find_dir, link_local, local_hint, named_dir
from suite.data.vision.cifar10_config import Config
from suite.registry import Component

if TYPE_CHECKING:  # torch is imported where a tensor is made: `data list` (locate) needs none
    import torch

TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
TEST = "test_batch"
# per-channel training-set mean and std (the values airbench and most CIFAR recipes use)
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"


def _candidates(base: Path | None) -> list[Path | None]:
    out: list[Path | None] = []
    for b in (base, named_dir("cifar10")):
        if b is not None:
            out += [b / "cifar-10-batches-py", b]
    return out


def locate(cfg: Config) -> Path:
    return find_dir("cifar10", _candidates(Path(cfg.path) if cfg.path else None), [*TRAIN, TEST],
                    local_hint("cifar10"))


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as f:
        d: dict[Any, Any] = pickle.load(f, encoding="bytes")  # noqa: S301 - the data set's own format
    try:
        data, labels = d[b"data"], d[b"labels"]
    except KeyError:
        raise DataMissing(f"{path}: not a CIFAR-10 batch (keys {sorted(d)[:5]})") from None
    data = np.asarray(data, dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != data.shape[0]:
        raise DataMissing(f"{path}: expected N x 3072 uint8 data and N labels, got {data.shape}, {len(labels)}")
    return data.reshape(-1, 3, 32, 32), np.asarray(labels, dtype=np.int64)


def _to_tensor(x: np.ndarray) -> torch.Tensor:
    import torch
    t = torch.from_numpy(x.astype(np.float32) / 255.0)
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (t - mean) / std


def load(cfg: Config) -> TensorSplits:
    import torch
    folder = locate(cfg)
    parts = [read_batch(folder / name) for name in TRAIN]
    tx = np.concatenate([p[0] for p in parts])
    ty = np.concatenate([p[1] for p in parts])
    vx, vy = read_batch(folder / TEST)
    tx, ty = tx[: cfg.train_limit], ty[: cfg.train_limit]
    vx, vy = vx[: cfg.val_limit], vy[: cfg.val_limit]
    return TensorSplits(
        _to_tensor(tx), torch.from_numpy(ty), _to_tensor(vx), torch.from_numpy(vy),
        meta={"input_shape": (3, 32, 32), "num_classes": 10, "source": str(folder),
              "augment": {"flip": cfg.flip, "translate": cfg.translate}},
    )


def prepare(source: Path | None) -> str:
    if source is None:
        from suite.data.download import fetch_and_extract

        fetch_and_extract(URL, named_dir("cifar10"))
        folder = locate(Config())
    else:
        folder = locate(Config(path=str(source)))
        link_local("cifar10", folder)
    n_train = sum(read_batch(folder / b)[1].shape[0] for b in TRAIN)
    n_test = read_batch(folder / TEST)[1].shape[0]
    return f"cifar10: {folder} ({n_train} train, {n_test} test images)"


COMPONENT = Component(Config, load=load, prepare=prepare)

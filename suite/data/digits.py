"""scikit-learn's bundled digits: 1,797 8x8 grey images of handwritten digits, 10 classes (BSD-3, UCI ML)."""

from __future__ import annotations

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from sklearn.datasets import load_digits  # bundled with scikit-learn: no download

from suite.data.base import TensorSplits, fixed_split
from suite.registry import Component


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    val_size: int = Field(default=360, gt=0, lt=1797)


def load(cfg: Config) -> TensorSplits:
    bunch = load_digits()
    x = torch.from_numpy((bunch.images / 16.0).astype(np.float32)).unsqueeze(1)  # N,1,8,8 in [0,1]
    y = torch.from_numpy(bunch.target.astype(np.int64))
    train_idx, val_idx = fixed_split(len(y), cfg.val_size)
    return TensorSplits(
        x[train_idx], y[train_idx], x[val_idx], y[val_idx],
        meta={"input_shape": (1, 8, 8), "num_classes": 10, "source": "sklearn.datasets.load_digits"},
    )


COMPONENT = Component(Config, load=load)

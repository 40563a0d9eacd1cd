"""scikit-learn's bundled digits: 1,797 8x8 grey images of handwritten digits, 10 classes (BSD-3, UCI ML).

Read straight from the CSV scikit-learn ships (`sklearn/datasets/data/digits.csv.gz`, what its `load_digits`
parses), without importing scikit-learn: that import (scipy with it) is ~2 s, more than the smoke run itself
spends training on this data. `tests/workloads/test_registry.py` checks the arrays equal `load_digits()`'s.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch

from suite.data.base import DataMissing, TensorSplits, fixed_split
from suite.data.vision.digits_config import Config
from suite.registry import Component


def csv_path() -> Path:
    """The bundled CSV, found without importing scikit-learn (bundled with it: no download)."""
    found = importlib.util.find_spec("sklearn")
    if found is None or not found.submodule_search_locations:
        raise DataMissing("data set digits: scikit-learn is not installed (it ships this data set); "
                                "`make install` installs it")
    path = Path(next(iter(found.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():
        raise DataMissing(f"data set digits: {path} is missing from the scikit-learn install; reinstall it")
    return path


def read_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images N x 8 x 8 in 0..16, labels N), as `sklearn.datasets.load_digits()` gives them."""
    with gzip.open(csv_path(), "rt") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def load(cfg: Config) -> TensorSplits:
    images, target = read_arrays()
    x = torch.from_numpy((images / 16.0).astype(np.float32)).unsqueeze(1)  # N,1,8,8 in [0,1]
    y = torch.from_numpy(target.astype(np.int64))
    train_idx, val_idx = fixed_split(len(y), cfg.val_size)
    return TensorSplits(
        x[train_idx], y[train_idx], x[val_idx], y[val_idx],
        meta={"input_shape": (1, 8, 8), "num_classes": 10, "source": "scikit-learn's digits.csv.gz (sklearn.datasets.load_digits)"},
    )


COMPONENT = Component(Config, load=load)

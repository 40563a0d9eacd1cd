"""Criteo 1TB click logs as MLPerf dlrm_dcnv2's reference (mlcommons/training recommendation_v2/torchrec_dlrm)
trains on: torchrec's preprocessed numpy days, `day_{d}_dense.npy` (float32 [N, 13]), `day_{d}_labels.npy`
([N] or [N, 1], 0/1) and the synthetic multi-hot sparse features its `materialize_synthetic_multihot_dataset.py`
writes, `day_{d}_sparse_multi_hot.npz` (np.savez of keys "0".."25", each int [N, multi_hot_sizes[j]], ids already
below num_embeddings_per_feature[j]). Days 0-22 train, in day order; the first half of day 23 is the validation
set (torchrec's "val" stage: 89,137,319 samples, closed_dlrm_dcnv2.yaml's eval_samples).

Read into memory (the npz members are loaded whole): right for generated files and a few days; the full 4.2 B
samples need the members unpacked and memory-mapped, not done here. A malformed or mismatched file is refused
naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from suite.data.base import DataMissing
from suite.data.locate import find_dir, named_dir
from suite.data.rec.criteo_config import N_DENSE, N_SPARSE, Config
from suite.registry import Component

HINT = "set data.path to the folder (or put the files under $TRAINBENCH_DATA/criteo_1tb)"


class CriteoDays:
    """Samples of the training days (in order) then the validation half; ids 1-based (0 is padding)."""

    def __init__(self, dense: np.ndarray, sparse: list[np.ndarray], label: np.ndarray, window: np.ndarray,
                 is_eval: np.ndarray, cfg: Config, meta: dict):
        self.dense, self.sparse, self.label, self.window, self.is_eval = dense, sparse, label, window, is_eval
        self.cardinality = {f"c{j}": n + 1 for j, n in enumerate(cfg.num_embeddings_per_feature)}
        self.multi_hot_sizes = list(cfg.multi_hot_sizes)
        self.meta = meta

    def __len__(self) -> int:
        return len(self.label)

    def split(self, n_windows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        return np.flatnonzero(~self.is_eval), np.flatnonzero(self.is_eval)


def _npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DataMissing(f"{path}: not a readable .npy array ({e})") from None


def _day(folder: Path, day: int, cfg: Config, half: bool) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    dense_p, label_p = folder / f"day_{day}_dense.npy", folder / f"day_{day}_labels.npy"
    sparse_p = folder / f"day_{day}_sparse_multi_hot.npz"
    for p in (dense_p, label_p, sparse_p):
        if not p.is_file():
            raise DataMissing(f"{p}: missing (day {day} of data.train_days / data.eval_day); {HINT}")
    dense = _npy(dense_p)
    if dense.ndim != 2 or dense.shape[1] != N_DENSE:
        raise DataMissing(f"{dense_p}: shape {dense.shape}, expected [N, {N_DENSE}]")
    label = _npy(label_p).reshape(len(_npy(label_p)), -1)
    if label.shape[1] != 1 or len(label) != len(dense):
        raise DataMissing(f"{label_p}: shape {label.shape}, expected [{len(dense)}] or [{len(dense)}, 1] "
                          f"(one per row of {dense_p.name})")
    label = label[:, 0]
    if not np.isin(label, (0, 1)).all():
        raise DataMissing(f"{label_p}: labels must be 0 or 1, found {label[~np.isin(label, (0, 1))][0]!r}")
    try:
        archive = np.load(sparse_p, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DataMissing(f"{sparse_p}: not a readable .npz archive ({e})") from None
    n = len(dense)
    keep = slice(0, n // 2) if half else slice(0, n)
    sparse = []
    with archive:
        for j in range(N_SPARSE):
            if str(j) not in archive.files:
                raise DataMissing(f"{sparse_p}: no key {str(j)!r} (sparse feature {j}; it has {archive.files[:30]})")
            ids = archive[str(j)]
            hot, rows = cfg.multi_hot_sizes[j], cfg.num_embeddings_per_feature[j]
            if ids.ndim != 2 or ids.shape != (n, hot):
                raise DataMissing(f"{sparse_p}: key {str(j)!r} has shape {ids.shape}, expected [{n}, {hot}] "
                                  f"({dense_p.name} rows x data.multi_hot_sizes[{j}])")
            bad = (ids < 0) | (ids >= rows)
            if bad.any():
                raise DataMissing(f"{sparse_p}: key {str(j)!r}: id {int(ids[bad][0])} is out of range [0, {rows}) "
                                  f"(data.num_embeddings_per_feature[{j}])")
            sparse.append(ids[keep][: cfg.limit].astype(np.int64) + 1)
    return dense[keep][: cfg.limit].astype(np.float32), sparse, label[keep][: cfg.limit].astype(np.float32)


def locate(cfg: Config) -> Path:
    first = (f"day_{cfg.train_days[0]}_dense.npy", f"day_{cfg.train_days[0]}_labels.npy",
             f"day_{cfg.train_days[0]}_sparse_multi_hot.npz")
    return find_dir("criteo_1tb", [Path(cfg.path) if cfg.path else None, named_dir("criteo_1tb")], first,
                    HINT)


def load(cfg: Config) -> CriteoDays:
    folder = locate(cfg)
    if cfg.eval_day in cfg.train_days:
        raise DataMissing(f"data.eval_day {cfg.eval_day} is also in data.train_days: evaluation must be held out")
    parts = [(_day(folder, d, cfg, half=False), d) for d in cfg.train_days]
    parts.append((_day(folder, cfg.eval_day, cfg, half=True), cfg.eval_day))
    dense = np.concatenate([p[0][0] for p in parts])
    sparse = [np.concatenate([p[0][1][j] for p in parts]) for j in range(N_SPARSE)]
    label = np.concatenate([p[0][2] for p in parts])
    window = np.concatenate([np.full(len(p[0][2]), k) for k, p in enumerate(parts)])
    is_eval = window == len(parts) - 1
    return CriteoDays(dense, sparse, label, window, is_eval, cfg,
                      {"source": str(folder), "license": "Criteo Terabyte click logs terms (research use)",
                       "positive_rate": float(label.mean()) if len(label) else 0.0})


def prepare(source: Path | None) -> str:
    data = load(Config(path=str(source) if source else None))
    train, val = data.split()
    return f"criteo_1tb: {data.meta['source']} ({len(train)} training samples, {len(val)} validation samples)"


COMPONENT = Component(Config, load=load, prepare=prepare)

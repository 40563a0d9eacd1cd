"""Generated days in the layout of MLPerf dlrm_dcnv2's preprocessed Criteo (suite/data/rec/criteo.py:
day_{d}_dense.npy, day_{d}_labels.npy, day_{d}_sparse_multi_hot.npz with keys "0".."25"), small tables and a
planted click signal (a linear score of the dense features and of feature 0's and 1's ids), for the reader's tests and
the tiny variant. `write(folder)` writes days 0..n_days-1 and returns the folder and the table sizes used."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from suite.data.rec.criteo_config import MULTI_HOT_SIZES, N_DENSE, N_SPARSE


def write(folder: Path, n_days: int = 4, rows: int = 600, table_rows: int = 50, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    weight = rng.normal(size=N_DENSE)
    item_score = rng.normal(size=(2, table_rows))
    for d in range(n_days):
        dense = np.log1p(rng.exponential(3.0, size=(rows, N_DENSE))).astype(np.float32)
        sparse = {str(j): rng.integers(0, table_rows, size=(rows, MULTI_HOT_SIZES[j])).astype(np.int32)
                  for j in range(N_SPARSE)}
        score = (dense - dense.mean(0)) @ weight * 0.5 + item_score[0][sparse["0"][:, 0]] + \
            item_score[1][sparse["1"][:, 0]]
        label = (score + rng.logistic(size=rows) > 0).astype(np.int32)
        np.save(folder / f"day_{d}_dense.npy", dense)
        np.save(folder / f"day_{d}_labels.npy", label.reshape(-1, 1))
        np.savez(folder / f"day_{d}_sparse_multi_hot.npz", **sparse)  # type: ignore[arg-type]  # numpy stubs
    return folder

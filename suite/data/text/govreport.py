"""The MLPerf llama2_70b_lora reference's preprocessed SCROLLS GovReport (`data: {name: govreport}`), read from a
local copy: `train-00000-of-00001.parquet` and `validation-00000-of-00001.parquet` (mlcommons/training
llama2_70b_lora/scripts/train.py), rows of Llama 2 token ids packed to 8192 (`input_ids`, and `labels` where the
validation rows mask each prompt with -100; `attention_mask` is ignored: packed rows are all ones).

Hands the workload `SampleSplits`: fixed-length samples, never windows of a stream. Needs `pyarrow`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from suite.data.base import DataMissing
from suite.data.locate import find_dir, link_local, local_hint, named_dir
from suite.data.text.govreport_config import Config
from suite.registry import Component

TRAIN, VALIDATION = "train-00000-of-00001.parquet", "validation-00000-of-00001.parquet"
IGNORE = -100


@dataclass
class SampleSplits:
    train_ids: np.ndarray  # (samples, seq_len) int32
    train_labels: np.ndarray  # same shape; IGNORE where no loss is taken
    val_ids: np.ndarray
    val_labels: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)  # vocab_size, seq_len, source


def locate(cfg: Config) -> Path:
    return find_dir("govreport", [Path(cfg.path) if cfg.path else None, named_dir("govreport")],
                    [TRAIN, VALIDATION], local_hint("govreport") + " (MLCommons members download it with the "
                    "R2 downloader: mlcommons/training llama2_70b_lora/README.md)")


def read_split(path: Path, cfg: Config, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataMissing("reading the GovReport parquet files needs `pyarrow`: pip install "
                          "'trainbench-suite[finetune]'") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError for a damaged file
        raise DataMissing(f"{path}: not a readable parquet file ({e})") from None
    if "input_ids" not in table.column_names:
        raise DataMissing(f"{path}: no input_ids column (has {table.column_names}); expected the reference's "
                          "preprocessed GovReport")
    rows = table.column("input_ids").to_pylist()[:limit]
    labels = table.column("labels").to_pylist()[:limit] if "labels" in table.column_names else rows
    if not rows:
        raise DataMissing(f"{path}: no rows")
    bad = next((i for i, r in enumerate(rows) if len(r) != cfg.seq_len), None)
    if bad is not None:
        raise DataMissing(f"{path}: row {bad} has {len(rows[bad])} tokens, data.seq_len is {cfg.seq_len} (the "
                          "reference packs every row to max_seq_len)")
    ids = np.asarray(rows, dtype=np.int32)
    lab = np.asarray(labels, dtype=np.int32)
    if lab.shape != ids.shape:
        raise DataMissing(f"{path}: labels {lab.shape} and input_ids {ids.shape} differ in shape")
    if int(ids.max()) >= cfg.vocab_size or int(ids.min()) < 0:
        raise DataMissing(f"{path}: token ids {int(ids.min())}..{int(ids.max())} outside the vocabulary of "
                          f"{cfg.vocab_size} (data.vocab_size): another tokenizer than the model's")
    return ids, lab


def load(cfg: Config) -> SampleSplits:
    folder = locate(cfg)
    train_ids, train_labels = read_split(folder / TRAIN, cfg, cfg.max_train_samples)
    val_ids, val_labels = read_split(folder / VALIDATION, cfg, cfg.max_val_samples)
    return SampleSplits(train_ids, train_labels, val_ids, val_labels, meta={
        "vocab_size": cfg.vocab_size, "seq_len": cfg.seq_len, "source": f"GovReport (MLPerf preprocessed, {folder})",
        "license": "SCROLLS GovReport terms", "train_samples": len(train_ids), "val_samples": len(val_ids)})


def prepare(source: Path | None) -> str:
    if source is None:
        raise DataMissing("govreport: " + local_hint("govreport"))
    folder = locate(Config(path=str(source)))
    link_local("govreport", folder)
    return f"govreport: {folder} linked as {named_dir('govreport')}"


COMPONENT = Component(Config, load=load, prepare=prepare)

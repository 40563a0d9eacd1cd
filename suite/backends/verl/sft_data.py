"""The suite's labelled samples (`task: causal_lm_samples`) as veRL 0.9.1's SFT trainer reads them: one parquet row
a sample, `input_ids` and `loss_mask` (the two token fields veRL's own MultiTurnSFTDataset yields for an item), read
by `TokenRows`, named to veRL as its `data.custom_cls` (veRL's hook for a dataset class: create_sft_dataset in
verl/trainer/sft_trainer.py). veRL's own dataset builds the tokens from chat `messages` by a chat template; the
suite's samples are token ids already (MLPerf's GovReport rows are pre-tokenized), so their ids and their mask go
in as they are, and no template can move a token or a mask.

The mask: veRL's sft_loss counts log p(input_ids[t]) where loss_mask[t] is 1 (it rolls the mask left by one onto
the log-probs of position t - 1), over the batch's masked tokens summed (verl/workers/utils/losses.py); the
suite's loss counts labels[t] != -100 for t >= 1 (logits[t - 1] predict labels[t]; token 0 is never a target),
the mean over the batch's counted tokens (suite/workloads/sample_lm.py). So loss_mask[t] = labels[t] != -100, and
loss_mask[0] = 0: veRL's roll over the packed batch would put a row's first mask on the previous row's last
position. The workload's labels are its ids where counted (the reference's), which `rows` checks.

Imported by veRL's trainer process (`pkg://suite.backends.verl.sft_data`): torch, numpy and pyarrow only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

IGNORE = -100
CLASS = "TokenRows"
PATH = "pkg://suite.backends.verl.sft_data"


def rows(ids: np.ndarray, labels: np.ndarray) -> tuple[list[list[int]], list[list[int]]]:
    """(input_ids, loss_mask) per sample from the workload's (ids, labels)."""
    counted = labels != IGNORE
    if not np.array_equal(np.where(counted, labels, ids), ids):
        raise ValueError("labels differ from the input ids where they are counted: veRL's SFT loss predicts the "
                         "input's own next token only")
    mask = counted.astype(np.int64)
    mask[:, 0] = 0
    return ids.astype(np.int64).tolist(), mask.tolist()


def write(ids: np.ndarray, labels: np.ndarray, path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    input_ids, loss_mask = rows(ids, labels)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"input_ids": input_ids, "loss_mask": loss_mask}), path)
    return path


class TokenRows:
    """veRL's SFT dataset interface (what create_sft_dataset constructs: parquet_files, tokenizer, config,
    processor, max_samples) over pre-tokenized rows; items as MultiTurnSFTDataset's with pad_mode no_padding."""

    def __init__(self, parquet_files: Any, tokenizer: Any = None, config: Any = None, processor: Any = None,
                 max_samples: int = -1) -> None:
        import pyarrow.parquet as pq

        files = [parquet_files] if isinstance(parquet_files, str) else list(parquet_files)
        ids: list[list[int]] = []
        mask: list[list[int]] = []
        for f in files:
            table = pq.read_table(f).to_pydict()
            ids += table["input_ids"]
            mask += table["loss_mask"]
        if max_samples is not None and max_samples > 0:
            ids, mask = ids[:max_samples], mask[:max_samples]
        pad_mode = str((config or {}).get("pad_mode", "no_padding")).lower().split(".")[-1]
        if pad_mode != "no_padding":
            raise ValueError(f"data.pad_mode {pad_mode}: TokenRows yields unpadded rows (no_padding) only")
        max_length = (config or {}).get("max_length")
        if max_length and any(len(r) > int(max_length) for r in ids):
            raise ValueError(f"a row is longer than data.max_length {max_length}")
        self.ids, self.mask = ids, mask

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, item: int) -> dict[str, Any]:
        import torch

        ids = torch.tensor(self.ids[item], dtype=torch.long)
        return {"input_ids": ids, "position_ids": torch.arange(len(ids), dtype=torch.long),
                "loss_mask": torch.tensor(self.mask[item], dtype=torch.long)}

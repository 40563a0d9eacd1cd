"""What a data component hands a workload: tensors held in memory (small sets) plus metadata."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a tensor is made: `data list` and DataMissing need none
    import torch


@dataclass
class TensorSplits:
    """Train and validation tensors, already normalised; `meta` tells model builders the shapes."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    meta: dict[str, Any] = field(default_factory=dict)  # input_shape, num_classes, vocab_size, source, license

    def to(self, device: torch.device) -> TensorSplits:
        return TensorSplits(
            self.train_x.to(device), self.train_y.to(device), self.val_x.to(device), self.val_y.to(device), self.meta
        )


class DataMissing(FileNotFoundError):
    """The data set is not on this machine; the message names the command that gets it."""


class DataTooSmall(DataMissing):
    """The data set here cannot serve the spec (a batch larger than its training split). Found during the untimed
    init and handled as a missing data set is: bad input, nothing recorded, the CLI exits 2."""


def fixed_split(n: int, n_val: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A train/val split that never depends on the run's seed, so every run sees the same validation set."""
    import torch

    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=g)
    return perm[n_val:], perm[:n_val]


def json_object(path: Path, error: type[DataMissing], missing: str) -> dict[str, Any]:
    """A JSON file holding one object (a model folder's config.json, tokenizer_config.json); every way it can be
    wrong raises `error` naming the file: `missing` says what to do when it is not there."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path} is missing: {missing}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path} is not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise error(f"{path}: expected a JSON object, found {type(raw).__name__}")
    return raw

"""MLPerf flux1's preprocessed data: CC12M (training) and COCO-2014 (validation) as VAE latents and text embeddings.

The layout the reference's downloads unpack to (mlcommons/training text_to_image/README.md, "Preprocessing"), each a
Hugging Face `datasets.save_to_disk` folder: `state.json` naming Arrow IPC stream files (`data-*.arrow`), one row a
sample with binary columns `t5_encodings`, `clip_encodings`, `mean`, `logvar`, each an `.npy` file of uint16 (the
bits of bfloat16, as the reference's `deserialize_numpy_array` reads them); the validation set adds `timestep`
(0..7, the fixed timestep index of that sample). `empty_encodings/{t5_empty,clip_empty}.npy` are the encodings of
the empty caption, used for the captions dropped for classifier-free guidance. The files are memory-mapped
(pyarrow, the `diffusion` extra); rows are decoded when a batch draws them, each checked for its shape and dtype.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from suite.data.base import DataMissing
from suite.data.diffusion.flux_latents_config import Config
from suite.registry import Component

if TYPE_CHECKING:  # torch is imported where a tensor is made: `data list` (locate) needs none
    import torch

COLUMNS = ("t5_encodings", "clip_encodings", "mean", "logvar")


class BadRecord(DataMissing):
    """A stored array of the wrong shape or dtype; the message names the file, the column and what was expected.
    Bad input like a missing data set (DataMissing): refused with exit 2, no result recorded."""


def _decode(blob: bytes, file: Path, column: str, row: int, shape: tuple[int, ...]) -> torch.Tensor:
    import torch
    a = np.load(io.BytesIO(blob), allow_pickle=False)
    if a.dtype != np.uint16 or tuple(a.shape) != shape:
        raise BadRecord(f"{file}: column {column!r}, row {row}: array of shape {tuple(a.shape)} and dtype {a.dtype}; "
                        f"expected shape {shape} of uint16 (bfloat16 bits, as the MLPerf flux1 preprocessing writes)")
    return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)


class ArrowSplit:
    """One save_to_disk folder, memory-mapped: rows decoded on demand."""

    def __init__(self, folder: Path, shapes: dict[str, tuple[int, ...]], need_timestep: bool):
        import pyarrow as pa

        if not folder.is_dir():
            raise DataMissing(f"data set flux_latents: {folder} is missing (the MLPerf flux1 preprocessed download, "
                              "text_to_image/README.md of mlcommons/training; set data.path; or "
                              "`trainbench data prepare flux_latents --synthetic` for a stand-in)")
        state = folder / "state.json"
        names = ([f["filename"] for f in json.loads(state.read_text())["_data_files"]] if state.is_file()
                 else sorted(p.name for p in folder.glob("*.arrow")))
        if not names:
            raise DataMissing(f"data set flux_latents: {folder} holds no .arrow files (state.json names none)")
        self.shapes, self.files, self.tables, self.starts = shapes, [], [], [0]
        for name in names:
            file = folder / name
            table = pa.ipc.open_stream(pa.memory_map(str(file))).read_all()
            missing = [c for c in (*COLUMNS, *(["timestep"] if need_timestep else [])) if c not in table.column_names]
            if missing:
                raise BadRecord(f"{file}: no column {', '.join(missing)} (has: {', '.join(table.column_names)})")
            self.files.append(file)
            self.tables.append(table)
            self.starts.append(self.starts[-1] + table.num_rows)
            if table.num_rows:  # the first row of each file checked at load, every row as a batch reads it
                self._row(len(self.files) - 1, 0)

    def __len__(self) -> int:
        return self.starts[-1]

    def _row(self, f: int, r: int) -> dict[str, Any]:
        table, file = self.tables[f], self.files[f]
        out: dict[str, Any] = {c: _decode(table.column(c)[r].as_py(), file, c, r, self.shapes[c]) for c in COLUMNS}
        if "timestep" in table.column_names:
            out["timestep"] = int(table.column("timestep")[r].as_py())
        return out

    def rows(self, idx: torch.Tensor) -> list[dict[str, Any]]:
        starts = np.asarray(self.starts)
        out = []
        for i in idx.tolist():
            f = int(np.searchsorted(starts, i, side="right") - 1)
            out.append(self._row(f, i - self.starts[f]))
        return out


class FluxLatents:
    """The task's view (suite/workloads/diffusion.py): latents drawn from the VAE's mean and log-variance, shifted
    and scaled as the reference does; T5 tokens as the text, CLIP's pooled vector as `y`; captions dropped for
    classifier-free guidance replaced by the empty caption's encodings."""

    def __init__(self, cfg: Config, root: Path):
        self.cfg = cfg
        t5, latent = tuple(cfg.t5_shape), tuple(cfg.latent_shape)
        shapes = {"t5_encodings": t5, "clip_encodings": (cfg.clip_dim,), "mean": latent, "logvar": latent}
        self.train = ArrowSplit(root / cfg.train_dir, shapes, need_timestep=False)
        self.val = ArrowSplit(root / cfg.val_dir, shapes, need_timestep=True)
        self.n_train, self.n_val = len(self.train), len(self.val)
        self.empty_t5: torch.Tensor | None = None
        self.empty_clip: torch.Tensor | None = None
        if cfg.caption_dropout > 0:
            self.empty_t5 = _empty(root / cfg.empty_dir / "t5_empty.npy", t5)
            self.empty_clip = _empty(root / cfg.empty_dir / "clip_empty.npy", (cfg.clip_dim,))
        self.meta = {**cfg.describe(), "source": str(root)}

    def _stack(self, rows: list[dict[str, Any]], g: torch.Generator) -> dict[str, torch.Tensor]:
        import torch
        mean = torch.stack([r["mean"] for r in rows]).float()
        logvar = torch.stack([r["logvar"] for r in rows]).float()
        latent = mean + torch.exp(0.5 * logvar) * torch.randn(mean.shape, generator=g)  # the VAE's sample
        x0 = (latent - self.cfg.autoencoder_shift) * self.cfg.autoencoder_scale
        return {"x0": x0, "txt": torch.stack([r["t5_encodings"] for r in rows]).float(),
                "y": torch.stack([r["clip_encodings"] for r in rows]).float()}

    def train_rows(self, idx: torch.Tensor, conditioning: str, g: torch.Generator) -> dict[str, torch.Tensor]:
        import torch
        out = self._stack(self.train.rows(idx), g)
        if self.empty_t5 is not None and self.empty_clip is not None:
            drop = torch.rand(len(idx), generator=g) < self.cfg.caption_dropout
            out["txt"][drop], out["y"][drop] = self.empty_t5, self.empty_clip
        return out

    def val_rows(self, idx: torch.Tensor, conditioning: str, g: torch.Generator) -> dict[str, torch.Tensor]:
        import torch
        rows = self.val.rows(idx)
        return {**self._stack(rows, g), "t_index": torch.tensor([r["timestep"] for r in rows])}


def _empty(file: Path, shape: tuple[int, ...]) -> torch.Tensor:
    """The reference loads these with np.load(...)[0]: one leading row, in bfloat16 or float."""
    import torch
    if not file.is_file():
        raise DataMissing(f"data set flux_latents: {file} is missing (the flux-1-empty-encodings download; or set "
                          "data.caption_dropout: 0)")
    a = np.load(file, allow_pickle=False)
    if tuple(a.shape) != (1, *shape) or a.dtype not in (np.uint16, np.float32, np.float16):
        raise BadRecord(f"{file}: array of shape {tuple(a.shape)} and dtype {a.dtype}; expected shape {(1, *shape)} "
                        "(uint16 bfloat16 bits, float16 or float32)")
    t = torch.from_numpy(a[0].view(np.int16).copy() if a.dtype == np.uint16 else a[0].astype(np.float32))
    return t.view(torch.bfloat16).float() if a.dtype == np.uint16 else t


def load(cfg: Config) -> FluxLatents:
    from suite.data.locate import data_root

    return FluxLatents(cfg, Path(cfg.path).expanduser() if cfg.path else data_root() / "flux1")


COMPONENT = Component(Config, load=load, describe=Config.describe)

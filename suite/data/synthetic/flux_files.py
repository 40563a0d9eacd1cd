"""Small files in the MLPerf flux1 preprocessing's on-disk format (Hugging Face `save_to_disk` folders of latents
and text embeddings), for `data prepare flux1 --synthetic` and the tests; written independently of the reader."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> the uint16 bits of bfloat16, rounded to nearest even (as torch's .to(torch.bfloat16))."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def _npy(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def write_flux_split(folder: Path, n: int, latent: tuple[int, ...] = (16, 32, 32), t5: tuple[int, int] = (256, 4096),
                     clip: int = 768, timesteps: bool = False, seed: int = 0, files: int = 1,
                     bad: dict[str, np.ndarray] | None = None) -> Path:
    """One Hugging Face `save_to_disk` folder as the MLPerf flux1 preprocessing leaves it: Arrow IPC stream files
    named by state.json, binary columns of .npy uint16 (bfloat16 bits), `timestep` 0..7 on the validation set.
    `bad` replaces a column's array in the first row (tests of the reader's refusals). Written with pyarrow and
    numpy, independently of suite/data/diffusion/flux_latents.py."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)

    def bf16_bits(shape: tuple[int, ...], scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
        return bfloat16_bits((rng.standard_normal(shape) * scale + shift).astype(np.float32))

    names = []
    per = -(-n // files)
    for f in range(files):
        rows = range(f * per, min(n, (f + 1) * per))
        cols: dict[str, list] = {"__key__": [f"{i:09d}" for i in rows]}
        for c, shape, scale, shift in (("t5_encodings", t5, 0.2, 0.0), ("clip_encodings", (clip,), 1.0, 0.0),
                                       ("mean", latent, 1.0, 0.1), ("logvar", latent, 0.5, -6.0)):
            cols[c] = [_npy(bad[c] if bad and c in bad and i == 0 else bf16_bits(shape, scale, shift)) for i in rows]
        if timesteps:
            cols["timestep"] = [i % 8 for i in rows]
        table = pa.table({k: pa.array(v, type=pa.binary() if k not in ("__key__", "timestep") else None)
                          for k, v in cols.items()})
        name = f"data-{f:05d}-of-{files:05d}.arrow"
        with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        names.append(name)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": x} for x in names],
                                                   "_fingerprint": "test", "_split": None}))
    (folder / "dataset_info.json").write_text(json.dumps({"features": {}}))
    return folder


def write_flux1(root: Path, n_train: int = 8, n_val: int = 8, **shapes) -> Path:
    """cc12m_preprocessed/, coco_preprocessed/ and empty_encodings/ as the MLPerf flux1 downloads unpack."""
    write_flux_split(root / "cc12m_preprocessed", n_train, files=2, **shapes)
    write_flux_split(root / "coco_preprocessed", n_val, timesteps=True, seed=1, **shapes)
    empty = root / "empty_encodings"
    empty.mkdir(parents=True, exist_ok=True)
    t5 = shapes.get("t5", (256, 4096))
    np.save(empty / "t5_empty.npy", np.zeros((1, *t5), dtype=np.uint16))
    np.save(empty / "clip_empty.npy", np.zeros((1, shapes.get("clip", 768)), dtype=np.uint16))
    return root

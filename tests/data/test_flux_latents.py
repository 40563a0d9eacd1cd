"""The MLPerf flux1 reader (suite/data/diffusion/flux_latents.py) on small files in the real format (Hugging Face save_to_disk
Arrow folders of .npy bfloat16 bits, tests/support/datafiles.py): rows across files, the VAE sample and scaling,
dropped captions, and refusals that name the file, the column and the expected shape."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest
import torch
from support.datafiles import write_flux1, write_flux_split

from suite.data.diffusion import flux_latents

SMALL = {"latent": (16, 4, 4), "t5": (6, 8), "clip": 12}
CFG = {"latent_shape": [16, 4, 4], "t5_shape": [6, 8], "clip_dim": 12}


def _raw(folder, file: str, column: str, row: int) -> np.ndarray:
    table = pa.ipc.open_stream(pa.memory_map(str(folder / file))).read_all()
    return np.load(io.BytesIO(table.column(column)[row].as_py()))


def test_rows_across_files_decode_to_the_stored_bfloat16(tmp_path):
    root = write_flux1(tmp_path, n_train=10, n_val=16, **SMALL)
    data = flux_latents.load(flux_latents.Config(path=str(root), **CFG))
    assert (data.n_train, data.n_val) == (10, 16)
    assert len(data.train.files) == 2  # rows 0-4 and 5-9
    row = data.train.rows(torch.tensor([7]))[0]
    want = torch.from_numpy(_raw(root / "cc12m_preprocessed", "data-00001-of-00002.arrow", "mean", 2).view(np.int16))
    assert row["mean"].dtype == torch.bfloat16 and torch.equal(row["mean"].view(torch.int16), want)
    val = data.val_rows(torch.arange(16), "text", torch.Generator().manual_seed(0))
    assert val["t_index"].tolist() == [i % 8 for i in range(16)]
    assert val["x0"].shape == (16, 16, 4, 4) and val["txt"].shape == (16, 6, 8) and val["y"].shape == (16, 12)
    assert data.meta["conditioning"] == {"text": {"context_dim": 8, "vec_dim": 12, "tokens": 6}}


def test_latents_are_the_vae_sample_shifted_and_scaled(tmp_path):
    root = write_flux1(tmp_path, n_train=4, n_val=8, **SMALL)
    cfg = flux_latents.Config(path=str(root), caption_dropout=0.0, **CFG)
    data = flux_latents.load(cfg)
    g = torch.Generator().manual_seed(3)
    got = data.train_rows(torch.tensor([1]), "text", g)["x0"][0]
    row = data.train.rows(torch.tensor([1]))[0]
    eps = torch.randn((1, 16, 4, 4), generator=torch.Generator().manual_seed(3))[0]
    want = (row["mean"].float() + torch.exp(0.5 * row["logvar"].float()) * eps - 0.1159) * 0.3611
    torch.testing.assert_close(got, want)


def test_dropped_captions_become_the_empty_encodings(tmp_path):
    root = write_flux1(tmp_path, n_train=64, n_val=8, **SMALL)
    data = flux_latents.load(flux_latents.Config(path=str(root), caption_dropout=0.5, **CFG))
    rows = data.train_rows(torch.arange(64), "text", torch.Generator().manual_seed(0))
    empty = (rows["txt"] == 0).flatten(1).all(1)  # the written empty encodings are zeros
    assert 16 < int(empty.sum()) < 48 and bool(((rows["y"] == 0).all(1) == empty).all())


@pytest.mark.parametrize("column,array,expect", [
    ("mean", np.zeros((16, 2, 4), dtype=np.uint16), "shape (16, 2, 4) and dtype uint16; expected shape (16, 4, 4)"),
    ("t5_encodings", np.zeros((6, 8), dtype=np.float32), "dtype float32; expected shape (6, 8) of uint16"),
])
def test_a_wrong_shape_or_dtype_names_the_file_and_the_expected_shape(tmp_path, column, array, expect):
    root = write_flux1(tmp_path, n_train=4, n_val=8, **SMALL)
    write_flux_split(root / "coco_preprocessed", 8, timesteps=True, bad={column: array}, **SMALL)
    with pytest.raises(flux_latents.BadRecord) as e:
        flux_latents.load(flux_latents.Config(path=str(root), **CFG))
    msg = str(e.value)
    assert str(root / "coco_preprocessed" / "data-00000-of-00001.arrow") in msg and repr(column) in msg, msg
    assert expect in msg, msg


def test_a_missing_folder_says_where_the_data_comes_from(tmp_path):
    with pytest.raises(flux_latents.DataMissing, match="cc12m_preprocessed is missing .*text_to_image"):
        flux_latents.load(flux_latents.Config(path=str(tmp_path)))

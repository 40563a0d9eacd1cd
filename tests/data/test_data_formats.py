"""The data readers on small files written in each data set's exact on-disk format, and their errors."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from support.datafiles import (
    write_cifar10,
    write_fashion,
    write_imagefolder,
    write_modded_shard,
    write_ogbg,
    write_shards,
)

from suite.data.base import DataMissing
from suite.data.graph import ogbg
from suite.data.text import streams as text
from suite.data.vision import cifar10, fashion_mnist, imagenet

ROOT = Path(__file__).resolve().parents[2]
torch.set_num_threads(1)


def cli_env(data_root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["TRAINBENCH_DATA"] = str(data_root)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def test_idx_reader_shapes_labels_and_bad_magic(tmp_path):
    folder = write_fashion(tmp_path / "fm", n_train=50, n_test=20)
    s = fashion_mnist.load(fashion_mnist.Config(path=str(folder)))
    assert s.train_x.shape == (50, 1, 28, 28) and s.val_x.shape == (20, 1, 28, 28)
    raw = fashion_mnist.read_idx(folder / "train-labels-idx1-ubyte.gz")
    assert torch.equal(s.train_y, torch.from_numpy(raw.astype(np.int64)))
    with gzip.open(folder / "t10k-labels-idx1-ubyte.gz", "wb") as f:
        f.write(b"\x00\x00\x0d\x01" + b"\x00\x00\x00\x14" + bytes(20))  # type 0x0d = float, not ubyte
    with pytest.raises(DataMissing, match="IDX"):
        fashion_mnist.load(fashion_mnist.Config(path=str(folder)))


def test_cifar10_pickle_batches(tmp_path):
    write_cifar10(tmp_path, per_batch=10)
    s = cifar10.load(cifar10.Config(path=str(tmp_path)))
    assert s.train_x.shape == (50, 3, 32, 32) and s.val_x.shape == (10, 3, 32, 32)
    # channel-major layout: the first 1024 bytes of a row are the red plane
    data, _ = cifar10.read_batch(tmp_path / "cifar-10-batches-py" / "data_batch_1")
    import pickle

    with open(tmp_path / "cifar-10-batches-py" / "data_batch_1", "rb") as f:
        row = pickle.load(f, encoding="bytes")[b"data"][0]
    assert np.array_equal(data[0, 0].reshape(-1), row[:1024])
    assert abs(float(s.train_x[0, 0, 0, 0]) - (row[0] / 255.0 - cifar10.MEAN[0]) / cifar10.STD[0]) < 1e-5


def test_cifar10_missing_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINBENCH_DATA", str(tmp_path))
    with pytest.raises(DataMissing, match="trainbench data prepare cifar10"):
        cifar10.load(cifar10.Config())


def test_modded_shard_header_is_checked(tmp_path):
    folder = write_shards(tmp_path / "fw", vocab=300, tokens=1000)
    s = text.load_shards(text.ShardConfig(path=str(folder), vocab_size=300))
    assert len(s.train) == 2 and s.train[0].shape == (1000,) and s.val[0].shape == (500,)
    body = np.fromfile(folder / "fineweb_train_000001.bin", dtype=np.uint16, offset=1024)
    assert np.array_equal(np.asarray(s.train[0]), body)
    bad = tmp_path / "bad.bin"
    write_modded_shard(bad, np.arange(10))
    with open(bad, "ab") as f:
        f.write(b"\x00\x00")  # one token more than the header says
    with pytest.raises(DataMissing, match="header says 10 tokens"):
        text.read_shard(bad, "modded")
    raw = tmp_path / "raw.bin"
    np.arange(7, dtype=np.uint16).tofile(raw)
    with pytest.raises(DataMissing, match="no modded-nanogpt header"):
        text.read_shard(raw, "modded")
    assert np.array_equal(np.asarray(text.read_shard(raw, "nanogpt")), np.arange(7))


def test_ogbg_raw_layout_adds_inverse_edges_and_keeps_nan(tmp_path):
    folder = write_ogbg(tmp_path, graphs=20, tasks=3)
    arrays = ogbg.read_raw(folder)
    n_nodes = np.loadtxt(gzip.open(folder / "raw/num-node-list.csv.gz"), dtype=np.int64)
    n_edges = np.loadtxt(gzip.open(folder / "raw/num-edge-list.csv.gz"), dtype=np.int64)
    assert arrays["x"].shape == (n_nodes.sum(), 9)
    assert arrays["edge_index"].shape == (2, 2 * n_edges.sum())
    g0 = arrays["edge_index"][:, : 2 * n_edges[0]]
    assert {tuple(e) for e in g0.T} == {(i, i + 1) for i in range(n_nodes[0] - 1)} | {
        (i + 1, i) for i in range(n_nodes[0] - 1)}
    assert np.isnan(arrays["y"]).sum() == 20  # one missing label per graph
    s = ogbg.load(ogbg.Config(path=str(folder)))
    train_idx = np.loadtxt(gzip.open(folder / "split/scaffold/train.csv.gz"), dtype=np.int64)
    assert len(s.train) == len(train_idx)
    b = s.train.batch(np.arange(len(s.train)))
    assert int(b["edge_index"].max()) < b["x"].shape[0]


def test_imagefolder_index_and_transforms(tmp_path):
    root = write_imagefolder(tmp_path / "inet", classes=3, per_class=2, size=48)
    s = imagenet.load(imagenet.Config(path=str(root), image_size=32))
    assert s.classes == sorted(s.classes) and len(s.train) == 6 and len(s.val) == 6
    x, y = imagenet.ImageDataset(s, train=True)[0]
    assert x.shape == (3, 32, 32) and y == 0
    x, _ = imagenet.ImageDataset(s, train=False)[5]
    assert x.shape == (3, 32, 32)
    (root / "val" / "n_unknown").mkdir()
    with pytest.raises(DataMissing, match="not a training class"):
        imagenet.load(imagenet.Config(path=str(root)))


def test_prepare_from_links_and_indexes(tmp_path):
    data_root = tmp_path / "data"
    src = write_ogbg(tmp_path / "copy", graphs=12)
    r = subprocess.run([sys.executable, "-m", "suite.cli", "data", "prepare", "ogbg_molpcba", "--from", str(src)],
                       capture_output=True, text=True, env=cli_env(data_root), timeout=120)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "12 graphs" in r.stdout
    assert (data_root / "ogbg_molpcba").resolve() == src.resolve()
    assert (src / ogbg.INDEX).exists()
    # a later load reads the index, not the CSVs: with the edge CSV emptied it still loads every edge
    n_edges = ogbg.read_raw(src)["edge_index"].shape[1]
    with gzip.open(src / "raw" / "edge.csv.gz", "wt") as f:
        f.write("")
    with pytest.raises(DataMissing):
        ogbg.read_raw(src)
    assert ogbg.load(ogbg.Config(path=str(data_root / "ogbg_molpcba"))).train.edge_index.shape[1] > 0
    assert ogbg.load_arrays(src)["edge_index"].shape[1] == n_edges
    r = subprocess.run([sys.executable, "-m", "suite.cli", "data", "prepare", "cifar10", "--from", str(tmp_path)],
                       capture_output=True, text=True, env=cli_env(data_root), timeout=120)
    assert r.returncode == 2 and "data_batch_1" in r.stdout + r.stderr


def test_data_list_reports_missing_sets(tmp_path):
    r = subprocess.run([sys.executable, "-m", "suite.cli", "data", "list", "--json"], capture_output=True,
                       text=True, env=cli_env(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    import json

    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert rows["pydoc_topics"]["present"] and not rows["imagenet"]["present"]
    assert "trainbench data prepare imagenet" in rows["imagenet"]["where"]

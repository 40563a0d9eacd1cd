"""Writers of small data sets in the exact on-disk formats of the full-tier readers (for the tests only):
written with plain numpy / pickle / gzip / Pillow, independently of the readers they check."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np


def write_idx(path: Path, array: np.ndarray) -> None:
    """LeCun's IDX: 0x00 0x00, type 0x08 (uint8), ndim, big-endian uint32 dims, data; gzipped."""
    a = np.asarray(array, dtype=np.uint8)
    header = bytes([0, 0, 8, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + a.tobytes())


def write_fashion(folder: Path, n_train: int = 64, n_test: int = 32, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        y = rng.integers(0, 10, n)
        x = (rng.random((n, 28, 28)) * 40 + y[:, None, None] * 20).astype(np.uint8)  # learnable: brightness = class
        write_idx(folder / f"{prefix}-images-idx3-ubyte.gz", x)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", y)
    return folder


def write_cifar10(root: Path, per_batch: int = 20, seed: int = 0) -> Path:
    """cifar-10-batches-py/ as the python tarball unpacks: pickled dicts with byte-string keys."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = rng.integers(0, 10, per_batch).tolist()
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        d = {b"batch_label": name.encode(), b"labels": labels, b"data": data,
             b"filenames": [f"img{i}.png".encode() for i in range(per_batch)]}
        with open(folder / name, "wb") as f:
            pickle.dump(d, f, protocol=2)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [f"c{i}".encode() for i in range(10)], b"num_vis": 3072}, f)
    return root


def write_imagefolder(root: Path, classes: int = 2, per_class: int = 4, size: int = 40) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in range(classes):
            d = root / split / f"n{c:08d}"
            d.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                px = (rng.random((size, size + 8, 3)) * 80 + 120 * c).clip(0, 255).astype(np.uint8)
                Image.fromarray(px).save(d / f"img_{i}.JPEG", format="JPEG")
    return root


def write_modded_shard(path: Path, tokens: np.ndarray) -> None:
    """modded-nanogpt data/fineweb.py: 256 int32 header (magic 20240520, version 1, n_tokens), uint16 body."""
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def write_shards(folder: Path, vocab: int = 512, n_train: int = 2, tokens: int = 4096) -> Path:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n_train):
        write_modded_shard(folder / f"fineweb_train_{i + 1:06d}.bin", rng.integers(0, vocab, tokens))
    write_modded_shard(folder / "fineweb_val_000000.bin", rng.integers(0, vocab, tokens // 2))
    return folder


def _csv_gz(path: Path, rows: list[list[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for r in rows:
            f.write(",".join("" if v is None else str(v) for v in r) + "\n")


def write_ogbg(root: Path, graphs: int = 40, tasks: int = 4, seed: int = 0) -> Path:
    """ogbg_molpcba/ as OGB's downloader leaves it: raw/*.csv.gz (edges one direction, local node numbers),
    split/scaffold/{train,valid,test}.csv.gz, labels with empty fields for missing ones."""
    rng = np.random.default_rng(seed)
    folder = root / "ogbg_molpcba"
    nodes, edges, nfeat, efeat, edge_rows, labels = [], [], [], [], [], []
    for _ in range(graphs):
        n = int(rng.integers(3, 9))
        chain = [(i, i + 1) for i in range(n - 1)]
        nodes.append([n])
        edges.append([len(chain)])
        edge_rows += [list(e) for e in chain]
        nfeat += [[int(rng.integers(0, 119)), *[int(rng.integers(0, 2)) for _ in range(8)]] for _ in range(n)]
        efeat += [[int(rng.integers(0, 5)), int(rng.integers(0, 6)), int(rng.integers(0, 2))] for _ in chain]
        lab: list[object] = [int(v) for v in rng.integers(0, 2, tasks)]
        lab[int(rng.integers(0, tasks))] = None
        labels.append(lab)
    raw = folder / "raw"
    _csv_gz(raw / "num-node-list.csv.gz", nodes)
    _csv_gz(raw / "num-edge-list.csv.gz", edges)
    _csv_gz(raw / "node-feat.csv.gz", nfeat)
    _csv_gz(raw / "edge.csv.gz", edge_rows)
    _csv_gz(raw / "edge-feat.csv.gz", efeat)
    _csv_gz(raw / "graph-label.csv.gz", labels)
    perm = rng.permutation(graphs)
    cut1, cut2 = int(graphs * 0.6), int(graphs * 0.8)
    for part, idx in (("train", perm[:cut1]), ("valid", perm[cut1:cut2]), ("test", perm[cut2:])):
        _csv_gz(folder / "split" / "scaffold" / f"{part}.csv.gz", [[int(i)] for i in idx])
    return folder


def full_tier_overrides(base: Path) -> dict[str, dict[str, str]]:
    """Small files in each full-tier data set's on-disk format, and the --set that points each spec at them."""
    return {
        "cv/cifar10_resnet": {"data.path": str(write_cifar10(base / "cifar", per_batch=16))},
        "cv/imagenet_resnet50": {"data.path": str(write_imagefolder(base / "inet", classes=2, per_class=4))},
        "nlp/gpt2_124m": {"data.path": str(write_shards(base / "fw", vocab=512))},
        "gnn/ogbg_molpcba": {"data.path": str(write_ogbg(base, graphs=40))},
        "rl/halfcheetah_ppo": {},
    } | flux1_overrides(base)


def flux1_overrides(base: Path) -> dict[str, dict[str, str]]:
    """cv/flux1's Arrow files need pyarrow (the `diffusion` extra): without it (a lent device machine has no package
    registry) flux1 is left out, so its data is reported missing and every other workload still gets its files."""
    import importlib.util

    if importlib.util.find_spec("pyarrow") is None:
        return {}
    return {"cv/flux1": {"data.path": str(write_flux1(base / "flux1", n_train=8, n_val=8))}}


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
    numpy, independently of suite/data/flux_latents.py."""
    import json

    import pyarrow as pa
    import torch

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)

    def bf16_bits(shape: tuple[int, ...], scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
        t = torch.from_numpy((rng.standard_normal(shape) * scale + shift).astype(np.float32)).to(torch.bfloat16)
        return t.view(torch.int16).numpy().view(np.uint16)

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

"""Small, seeded data sets in the exact on-disk formats the full-tier readers take (`trainbench data prepare NAME
--synthetic`, the tests, benchmarks/device_check.py --synthetic-data): written with plain numpy / pickle / gzip /
pyarrow / Pillow, independently of the readers in suite/data (this module imports none of them), so a test that
reads these files checks a reader against the format, not against itself.

A folder `prepare` fills holds MARKER: a run that reads under it is recorded `synthetic_data` (suite/harness.py),
its figures mean nothing about the real task, and the site keeps it off the leaderboards.
"""

from __future__ import annotations

import gzip
import json
import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from suite.data.synthetic.flux_files import write_flux1

MARKER = "TRAINBENCH_SYNTHETIC.json"


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


def write_megatron_indexed(prefix: Path, documents: list[np.ndarray], dtype: type = np.int32) -> Path:
    """PREFIX.bin / PREFIX.idx as megatron-core's IndexedDatasetBuilder writes them (one sequence per document):
    the tokens back to back; b"MMIDIDX\\x00\\x00", version u64 1, dtype code u8, sequence count u64, document-bound
    count u64, int32 lengths, int64 byte pointers, int64 document bounds (0 .. sequence count)."""
    codes = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.uint16: 8}
    prefix.parent.mkdir(parents=True, exist_ok=True)
    arrays = [np.asarray(d, dtype=dtype) for d in documents]
    lengths = np.array([len(a) for a in arrays], dtype=np.int32)
    pointers = np.concatenate([[0], np.cumsum(lengths.astype(np.int64))[:-1]]) * np.dtype(dtype).itemsize
    with open(f"{prefix}.bin", "wb") as f:
        for a in arrays:
            f.write(a.tobytes())
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, codes[dtype], len(arrays), len(arrays) + 1))
        f.write(lengths.tobytes() + pointers.astype(np.int64).tobytes() + np.arange(len(arrays) + 1).astype(np.int64).tobytes())
    return prefix


def write_c4_indexed(folder: Path, vocab: int = 512, train_tokens: int = 40000, val_tokens: int = 12000,
                     seed: int = 0) -> Path:
    """The MLPerf LLM references' preprocessed C4 layout (small_llm_pretraining/nemo/README.md section 3): one
    train shard c4-train.en_6_text_document and c4-validation-91205-samples.en_text_document, int32 tokens below
    `vocab`, as documents of 20-300 tokens."""
    rng = np.random.default_rng(seed)
    for name, total in (("c4-train.en_6_text_document", train_tokens),
                        ("c4-validation-91205-samples.en_text_document", val_tokens)):
        docs, n = [], 0
        while n < total:
            doc = rng.integers(0, vocab, int(rng.integers(20, 300)))
            docs.append(doc)
            n += len(doc)
        write_megatron_indexed(folder / name, docs)
    return folder


def write_govreport(folder: Path, n_train: int = 8, n_val: int = 4, seq_len: int = 64, vocab: int = 512,
                    seed: int = 0, train_prompts: bool = False) -> Path:
    """The MLPerf llama2_70b_lora reference's two parquet files (pyarrow): packed rows of `seq_len` token ids;
    train labels equal to the ids, validation labels -100 over a leading "prompt" of each row; attention_mask
    all ones. Learnable: each row repeats a short random phrase. `train_prompts`: train labels -100 over a leading
    prompt too, of a different length in each row (so micro-batches count different numbers of tokens)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)

    def row() -> list[int]:
        phrase = rng.integers(0, vocab, 8)
        return np.resize(phrase, seq_len).tolist()

    folder.mkdir(parents=True, exist_ok=True)
    train = [row() for _ in range(n_train)]
    val = [row() for _ in range(n_val)]
    val_labels = [[-100] * (seq_len // 2) + r[seq_len // 2:] for r in val]
    train_labels = train
    if train_prompts:
        cut = rng.integers(seq_len // 8, seq_len * 7 // 8, n_train)
        train_labels = [[-100] * int(k) + r[int(k):] for k, r in zip(cut, train, strict=True)]
    for name, ids, labels in (("train", train, train_labels), ("validation", val, val_labels)):
        pq.write_table(pa.table({"input_ids": ids, "attention_mask": [[1] * seq_len for _ in ids], "labels": labels}),
                       folder / f"{name}-00000-of-00001.parquet")
    return folder


def write_fused_qkv_llama(folder: Path, n_layer: int = 2, d: int = 64, heads: int = 4, kv_heads: int = 2,
                          ffn: int = 160, vocab: int = 512, seed: int = 0) -> Path:
    """A Llama checkpoint in the layout of MLPerf's "Llama2-70b-fused-qkv-mlperf": config.json and
    model.safetensors with `self_attn.qkv_proj` (rows [q; k; v]) in bf16, written with safetensors alone."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    hd = d // heads
    shapes = {"model.embed_tokens.weight": (vocab, d), "model.norm.weight": (d,), "lm_head.weight": (vocab, d)}
    for i in range(n_layer):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                   p + "self_attn.qkv_proj.weight": ((heads + 2 * kv_heads) * hd, d),
                   p + "self_attn.o_proj.weight": (d, heads * hd), p + "mlp.gate_proj.weight": (ffn, d),
                   p + "mlp.up_proj.weight": (ffn, d), p + "mlp.down_proj.weight": (d, ffn)}
    tensors = {k: (torch.ones(s) if len(s) == 1 else 0.05 * torch.randn(s, generator=g)).to(torch.bfloat16)
               for k, s in shapes.items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
              "num_hidden_layers": n_layer, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
              "intermediate_size": ffn, "vocab_size": vocab, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "rope_scaling": None, "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "max_position_embeddings": 4096}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


# ---- `trainbench data prepare NAME --synthetic` ------------------------------------------------------------


def write_marker(folder: Path, name: str, seed: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / MARKER
    marker.write_text(json.dumps({"synthetic": True, "data_set": name, "seed": seed,
                                  "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
                                  "writer": "suite/data/synthetic/files.py"}, indent=1) + "\n")
    return marker


def marked(path: str | Path | None, stop: Path | None = None) -> Path | None:
    """The folder holding MARKER at `path` or above it (up to `stop`, else the filesystem root); None if none."""
    if path is None:
        return None
    p = Path(path).expanduser()
    try:
        p = p.resolve()
    except OSError:
        return None
    for folder in (p, *p.parents):
        if (folder / MARKER).is_file():
            return folder
        if stop is not None and folder == stop:
            break
    return None


def sources(spec: Any, root: Path) -> list[str]:
    """The synthetic folders (holding MARKER) a run of `spec` reads: its data.path, data.tokenizer and
    model.checkpoint (absolute, or relative to the working folder or to $TRAINBENCH_DATA `root`), else the data
    set's default folder under `root`."""
    candidates: list[Path] = []
    path = getattr(spec.data, "path", None)
    for value in (path, getattr(spec.data, "tokenizer", None), getattr(spec.model, "checkpoint", None)):
        if isinstance(value, str | Path) and str(value):
            p = Path(value).expanduser()
            candidates += [p] if p.is_absolute() else [p, root / p]
    if not path:
        name = spec.data.name
        candidates.append(root / (SYNTHETIC[name].folder if name in SYNTHETIC else name))
    found = {str(m) for c in candidates if c.exists() and (m := marked(c)) is not None}
    return sorted(found)


def warnings(folders: list[str]) -> list[str]:
    """The result's warning for a run that read synthetic folders (none for a run on real data)."""
    return [f"SYNTHETIC data ({', '.join(folders)}): written by `trainbench data prepare --synthetic`; figures say "
            "nothing of the real task and stay off the leaderboards"] if folders else []


@dataclass(frozen=True)
class Synthetic:
    """What `data prepare NAME --synthetic` writes: `folder` under $TRAINBENCH_DATA (where the reader looks by
    default, or where the tiny variant points), `write(folder, seed)`, and which recipes read it."""

    folder: str
    write: Callable[[Path, int], Any]
    recipes: tuple[str, ...]
    needs: tuple[str, ...] = ()  # importable modules the writer needs (pyarrow: the `diffusion`/`llm` extras)
    note: str = ""


def _gsm8k(folder: Path, seed: int) -> None:
    from suite.data.synthetic import gsm8k  # the tiny Qwen2 folder (tokenizer + weights) and veRL's parquet

    gsm8k.write_data(folder / "data")
    gsm8k.write_model(folder / "model", seed=seed)


SYNTHETIC: dict[str, Synthetic] = {
    "megatron_indexed": Synthetic(
        "megatron_indexed", lambda f, seed: write_c4_indexed(f, vocab=512, seed=seed),
        ("nlp/llama31_8b", "nlp/gpt_oss_20b", "nlp/deepseekv3_671b"),
        note="C4 as the MLPerf LLM references preprocess it (int32 ids below 512: the tiny variants' vocabulary)"),
    "govreport": Synthetic(
        "govreport", lambda f, seed: write_govreport(f, seq_len=64, vocab=512, seed=seed), ("nlp/llama2_70b_lora",),
        needs=("pyarrow",), note="rows of 64 tokens: the tiny variant's data.seq_len (the full recipe reads 8192)"),
    "flux_latents": Synthetic("flux1", lambda f, seed: write_flux1(f, n_train=8, n_val=8), ("cv/flux1",), needs=("pyarrow",),
                              note="CC12M/COCO latents and T5/CLIP encodings at the full recipe's shapes"),
    "gsm8k": Synthetic("gsm8k-tiny", _gsm8k, ("rl/gsm8k_grpo",), needs=("pyarrow", "tokenizers", "torch"),
                       note="GSM8K-format rows and a 2-layer Qwen2 folder with its tokenizer: the tiny variant's "
                            "data.path, data.tokenizer and model.checkpoint (gsm8k-tiny/...)"),
    "imagenet": Synthetic("imagenet", lambda f, seed: write_imagefolder(f, classes=2, per_class=4), ("cv/imagenet_resnet50",),
                          needs=("PIL",)),
    "cifar10": Synthetic("cifar10", lambda f, seed: write_cifar10(f, per_batch=16, seed=seed), ("cv/cifar10_resnet",)),
    "fineweb10B": Synthetic("fineweb10B", lambda f, seed: write_shards(f, vocab=512), ("nlp/gpt2_124m",)),
    # write_ogbg makes ROOT/ogbg_molpcba/{raw,split}: ROOT is the folder's parent ($TRAINBENCH_DATA)
    "ogbg_molpcba": Synthetic("ogbg_molpcba", lambda f, seed: write_ogbg(f.parent, graphs=40, seed=seed),
                              ("gnn/ogbg_molpcba",)),
    "yambda": Synthetic("yambda", lambda f, seed: _rec("yambda_fixture", f, seed), ("rec/dlrmv4",), needs=("pyarrow",),
                        note="the processed Yambda layout (five files): the tiny variant's users, items and sessions"),
    "criteo_1tb": Synthetic("criteo_1tb", lambda f, seed: _rec("criteo_fixture", f, seed), ("rec/dlrm_dcnv2",),
                            note="the reference's preprocessed Criteo days (dense, labels, multi-hot npz), small tables"),
}


def _rec(fixture: str, folder: Path, seed: int) -> Path:
    """The recommenders' writers live beside their readers' format constants (suite/data/rec/*_fixture.py)."""
    import importlib

    return importlib.import_module(f"suite.data.rec.{fixture}").write(folder, seed=seed)


def prepare(name: str, data_root: Path, seed: int = 0) -> tuple[Path, Synthetic]:
    """Write data set `name`'s synthetic files into $TRAINBENCH_DATA/<folder> and mark them. A folder that holds
    real data (no MARKER) or is a link to a local copy is never touched: FileExistsError says so."""
    import importlib.util

    if name not in SYNTHETIC:
        raise KeyError(f"no synthetic generator for data set {name!r}; there is one for: {', '.join(SYNTHETIC)}")
    entry = SYNTHETIC[name]
    missing = [m for m in entry.needs if importlib.util.find_spec(m) is None]
    if missing:
        raise ModuleNotFoundError(f"writing synthetic {name} needs {', '.join(missing)}: pip install "
                                  f"{' '.join('pillow' if m == 'PIL' else m for m in missing)}")
    folder = data_root / entry.folder
    if folder.is_symlink():
        raise FileExistsError(f"{folder} links to a local copy ({folder.resolve()}); synthetic files are never "
                              "written over real data: unlink it, or set TRAINBENCH_DATA to another folder")
    if folder.exists() and any(folder.iterdir()) and not (folder / MARKER).is_file():
        raise FileExistsError(f"{folder} holds data that is not synthetic (no {MARKER}); synthetic files are never "
                              "written over real data: move it away, or set TRAINBENCH_DATA to another folder")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).unlink(missing_ok=True)  # half-written files must not pass as a finished synthetic set
    entry.write(folder, seed)
    write_marker(folder, name, seed)
    return folder, entry

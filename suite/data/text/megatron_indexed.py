"""Megatron indexed datasets (`.bin` + `.idx`, the MMIDIDX format): what Megatron's tools/preprocess_data.py writes
and what the MLPerf LLM references read their preprocessed C4 from (llama31_8b, gpt_oss_20b, deepseekv3_671b).

The `.bin` is every sequence's tokens back to back in one dtype. The `.idx` (megatron/core/datasets/
indexed_dataset.py, `_IndexWriter`) is little-endian: b"MMIDIDX\\x00\\x00", version u64 (1), dtype code u8,
sequence count u64, document count u64, then int32 sequence lengths, int64 byte pointers into the `.bin`, int64
document boundaries (sequence indices, 0 first, the sequence count last), and in multimodal sets int8 modes.
Every one of these is checked against the other and against the `.bin`'s size before a run starts, so an `.idx`
from another preprocessing run, or a truncated copy, is refused naming both files instead of training on
misaligned tokens. The reader imports no Megatron: the format is read with numpy memory maps.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from suite.data.base import DataMissing
from suite.data.locate import glob_in, link_local, local_hint, named_dir
from suite.data.text.megatron_indexed_config import Config
from suite.data.text.streams import TokenSplits
from suite.registry import Component

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
DTYPES: dict[int, type[np.number]] = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
                                      6: np.float64, 7: np.float32, 8: np.uint16}
_HEAD = len(MAGIC) + 8 + 1 + 8 + 8  # 34 bytes before the arrays


class IndexMismatch(DataMissing):
    """An `.idx` that does not describe its `.bin` (or is not an index at all)."""


@dataclass
class IndexedDataset:
    """One `.bin` / `.idx` pair: the token stream (documents back to back) and where each sequence starts."""

    prefix: Path
    tokens: np.ndarray  # 1-D memory map over the whole .bin
    lengths: np.ndarray  # tokens per sequence
    offsets: np.ndarray  # first token of each sequence, in tokens
    document_indices: np.ndarray  # sequence index where each document starts; the last is the sequence count

    @property
    def documents(self) -> int:
        return int(self.document_indices.shape[0]) - 1

    def sequence(self, i: int) -> np.ndarray:
        return self.tokens[int(self.offsets[i]) : int(self.offsets[i]) + int(self.lengths[i])]

    def document(self, i: int) -> np.ndarray:
        first, end = int(self.document_indices[i]), int(self.document_indices[i + 1])
        if first == end:
            return self.tokens[:0]
        return self.tokens[int(self.offsets[first]) : int(self.offsets[end - 1]) + int(self.lengths[end - 1])]


def _refuse(idx: Path, bin_: Path, what: str) -> IndexMismatch:
    return IndexMismatch(f"{idx} does not match {bin_}: {what}. The two files must come from the same "
                         "preprocessing run (Megatron's tools/preprocess_data.py writes both); re-copy or re-make the "
                         "pair, or point data.path / the prefix at the matching one")


def read_indexed(prefix: str | Path) -> IndexedDataset:
    """PREFIX.idx and PREFIX.bin, checked against each other (IndexMismatch / DataMissing otherwise)."""
    prefix = Path(str(prefix).removesuffix(".bin").removesuffix(".idx"))
    idx, bin_ = prefix.with_name(prefix.name + ".idx"), prefix.with_name(prefix.name + ".bin")
    for path in (idx, bin_):
        if not path.is_file():
            raise DataMissing(f"{path} is missing: a Megatron indexed dataset is a .bin and a .idx with one prefix")
    idx_size, bin_size = idx.stat().st_size, bin_.stat().st_size
    with open(idx, "rb") as f:
        head = f.read(_HEAD)
    if len(head) < _HEAD or head[: len(MAGIC)] != MAGIC:
        raise IndexMismatch(f"{idx} is not a Megatron index (want the magic {MAGIC!r} at its start, found "
                            f"{head[: len(MAGIC)]!r}); give the .idx that preprocess_data.py wrote beside {bin_}")
    version, code, n_seq, n_doc_bounds = struct.unpack("<QBQQ", head[len(MAGIC):])
    if version != VERSION:
        raise IndexMismatch(f"{idx}: index version {version}, this reader knows {VERSION}")
    if code not in DTYPES:
        raise IndexMismatch(f"{idx}: dtype code {code} is not one Megatron writes (1-8)")
    dtype = np.dtype(DTYPES[code])
    arrays = _HEAD + 4 * n_seq + 8 * n_seq + 8 * n_doc_bounds
    if idx_size not in (arrays, arrays + n_seq):  # + n_seq: the int8 modes of a multimodal set
        raise _refuse(idx, bin_, f"its header promises {n_seq} sequences and {n_doc_bounds} document bounds "
                                 f"({arrays} bytes), the file is {idx_size} bytes (truncated or not an index)")
    lengths = np.memmap(idx, dtype=np.int32, mode="r", offset=_HEAD, shape=(n_seq,)) if n_seq else np.zeros(0, np.int32)
    pointers = (np.memmap(idx, dtype=np.int64, mode="r", offset=_HEAD + 4 * n_seq, shape=(n_seq,))
                if n_seq else np.zeros(0, np.int64))
    bounds = np.memmap(idx, dtype=np.int64, mode="r", offset=_HEAD + 12 * n_seq, shape=(n_doc_bounds,))
    if (lengths < 0).any():
        raise _refuse(idx, bin_, "it has negative sequence lengths")
    total = int(lengths.sum(dtype=np.int64))
    if total * dtype.itemsize != bin_size:
        raise _refuse(idx, bin_, f"the index holds {total} {dtype.name} tokens ({total * dtype.itemsize} bytes), "
                                 f"the .bin is {bin_size} bytes")
    expected = np.concatenate([[0], np.cumsum(lengths.astype(np.int64))[:-1]]) * dtype.itemsize if n_seq else pointers
    if not np.array_equal(pointers, expected):
        first = int(np.nonzero(pointers != expected)[0][0])
        raise _refuse(idx, bin_, f"sequence {first} starts at byte {int(pointers[first])}, its predecessors end at "
                                 f"{int(expected[first])}")
    if n_doc_bounds == 0 or bounds[0] != 0 or bounds[-1] != n_seq or (np.diff(bounds) < 0).any():
        raise _refuse(idx, bin_, f"its document bounds must rise from 0 to the sequence count {n_seq}")
    tokens = np.memmap(bin_, dtype=dtype, mode="r", shape=(total,)) if total else np.zeros(0, dtype)
    return IndexedDataset(prefix, tokens, np.asarray(lengths), expected // dtype.itemsize, np.asarray(bounds))


CHECK_CHUNK = 1 << 24  # tokens per pass of the range check (a 64 MiB int32 window of the memory map)


def check_token_range(ds: IndexedDataset, vocab_size: int) -> None:
    """Every token id in [0, vocab_size), checked in the untimed init (issue 50 item 8): an id outside the
    vocabulary would be an IndexError at some step (a device-side assert on a GPU). Names the file, the token's
    position in it and its sequence. One streaming pass over the memory map (about 1 GB/s)."""
    tokens = ds.tokens
    for start in range(0, int(tokens.shape[0]), CHECK_CHUNK):
        chunk = np.asarray(tokens[start : start + CHECK_CHUNK])
        if chunk.size and (int(chunk.min()) < 0 or int(chunk.max()) >= vocab_size):
            at = start + int(np.nonzero((chunk < 0) | (chunk >= vocab_size))[0][0])
            seq = int(np.searchsorted(ds.offsets, at, side="right")) - 1
            raise DataMissing(f"{ds.prefix}.bin: token {at} (sequence {seq}, position {at - int(ds.offsets[seq])}) "
                              f"is id {int(tokens[at])}, outside the vocabulary [0, {vocab_size}) of data.vocab_size: "
                              "the data was tokenized with another tokenizer, or set data.vocab_size to its size")


def _prefixes(folder: Path, pattern: str) -> list[Path]:
    return [p.with_name(p.name[: -len(".idx")]) for p in glob_in(folder, pattern) if p.name.endswith(".idx")]


def find_pairs(cfg: Config) -> tuple[Path, list[Path], list[Path]]:
    """The folder and its train / validation prefixes (DataMissing saying how to get them)."""
    folder = Path(cfg.path).expanduser() if cfg.path else named_dir("megatron_indexed")
    train, val = _prefixes(folder, cfg.train_glob)[: cfg.max_train_files], _prefixes(folder, cfg.val_glob)
    if not train or not val:
        raise DataMissing(f"Megatron indexed data ({cfg.train_glob}, {cfg.val_glob}) not found in {folder}. "
                          "Make it with Megatron's tools/preprocess_data.py (the MLPerf LLM references' C4 is in "
                          "this format), then " + local_hint("megatron_indexed"))
    return folder, train, val


def locate(cfg: Config) -> Path:
    """Where the data is (`trainbench data list`), without reading it."""
    return find_pairs(cfg)[0]


def load(cfg: Config) -> TokenSplits:
    folder, train, val = find_pairs(cfg)
    train_sets, val_sets = [read_indexed(p) for p in train], [read_indexed(p) for p in val]
    for ds in (*train_sets, *val_sets):
        if ds.tokens.dtype.kind not in "iu":
            raise IndexMismatch(f"{ds.prefix}.idx: tokens are {ds.tokens.dtype.name}, not integers")
        check_token_range(ds, cfg.vocab_size)
    return TokenSplits([d.tokens for d in train_sets], [d.tokens for d in val_sets], meta={
        "vocab_size": cfg.vocab_size, "source": str(folder), "shards": len(train_sets),
        "documents": sum(d.documents for d in train_sets)})


def prepare(source: Path | None) -> str:
    """`trainbench data prepare megatron_indexed --from FOLDER`: every pair checked, then the folder linked."""
    if source is None:
        raise DataMissing("Megatron indexed data is not downloaded by trainbench; make it with Megatron's "
                          "tools/preprocess_data.py, then `trainbench data prepare megatron_indexed --from FOLDER`")
    splits = load(Config(path=str(source)))
    link_local("megatron_indexed", Path(source))
    return (f"megatron_indexed: {source} ({len(splits.train)} train files, {splits.train_tokens()} tokens, "
            f"{splits.meta['documents']} documents; {len(splits.val)} validation files)")


COMPONENT = Component(Config, load=load, prepare=prepare)

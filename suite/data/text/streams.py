"""Token streams for language models: char-level English texts that install from registries, and
pre-tokenized GPT-2 shards in the nanoGPT / modded-nanogpt `.bin` format.

A data set here hands the workload `TokenSplits`: one or more 1-D integer arrays per split (memory-mapped
for shards), never a tensor of the whole corpus. Char-level texts split at a fixed character offset (the
last `val_fraction` of the text is validation, as nanoGPT's shakespeare_char does), never by the run seed.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from suite.data.base import DataMissing
from suite.data.locate import find_dir, glob_in, install_hint, link_local, local_hint, named_dir, registry_dir
from suite.data.text.streams_config import AustenConfig, CharConfig, ShardConfig
from suite.registry import Component


@dataclass
class TokenSplits:
    train: list[np.ndarray]  # one 1-D integer array per shard
    val: list[np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)  # vocab_size, source, license, chars

    def train_tokens(self) -> int:
        return sum(int(a.shape[0]) for a in self.train)


def char_splits(text: str, val_fraction: float, source: str, license_: str, limit: int | None) -> TokenSplits:
    if limit:
        text = text[:limit]
    chars = sorted(set(text))  # the vocabulary is a function of the text alone, identical for every run
    lut = {c: i for i, c in enumerate(chars)}
    ids = np.fromiter((lut[c] for c in text), dtype=np.int16 if len(chars) < 2**15 else np.int32, count=len(text))
    cut = int(len(ids) * (1 - val_fraction))
    return TokenSplits([ids[:cut]], [ids[cut:]], meta={
        "vocab_size": len(chars), "source": source, "license": license_, "chars": len(text)})


# ---- CPython's own documentation topics (pydoc_data.topics): on every CPython --------------------------


def pydoc_topics_text() -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def load_pydoc_topics(cfg: CharConfig) -> TokenSplits:
    return char_splits(pydoc_topics_text(), cfg.val_fraction, "pydoc_data.topics (CPython)", "PSF-2.0",
                       cfg.limit_chars)


# ---- Jane Austen's six novels (Debian r-cran-janeaustenr, an R lazy-load database read with `rdata`) ------

AUSTEN_BOOKS = ("sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey", "persuasion")
AUSTEN_DIR = "usr/lib/R/site-library/janeaustenr/data"


def read_r_lazyload(folder: Path, names: tuple[str, ...]) -> dict[str, Any]:
    """R's lazy-load database: Rdata.rdx is a gzip-serialized index {variables: name -> (offset, length)};
    each object in Rdata.rdb is a 4-byte big-endian length then a zlib stream of R serialization."""
    try:
        import rdata
    except ImportError:
        raise DataMissing("reading the Austen texts needs the `rdata` package: pip install 'trainbench-suite[nlp]'") from None
    import warnings

    def parse(body: bytes) -> Any:
        with warnings.catch_warnings():  # lazy-load bodies carry no RDS magic; rdata warns, then parses them as RDS
            warnings.simplefilter("ignore", UserWarning)
            return rdata.conversion.convert(rdata.parser.parse_data(body))

    index = parse(gzip.decompress((folder / "Rdata.rdx").read_bytes()))
    variables = {str(k): v for k, v in index["variables"].items()}
    blob = (folder / "Rdata.rdb").read_bytes()
    out = {}
    for name in names:
        if name not in variables:
            raise DataMissing(f"{folder}: no object {name!r} in the lazy-load index (has {sorted(variables)})")
        off, length = (int(t) for t in variables[name])
        raw = blob[off : off + length]
        (size,) = struct.unpack(">I", raw[:4])
        body = zlib.decompress(raw[4:])
        if len(body) != size:
            raise DataMissing(f"{folder}: object {name!r} is {len(body)} bytes, index says {size}")
        out[name] = parse(body)
    return out


def locate_austen(cfg: AustenConfig) -> Path:
    return find_dir("austen", [
        Path(cfg.path) if cfg.path else None, named_dir("austen"),
        registry_dir("r-cran-janeaustenr") / AUSTEN_DIR, Path("/") / AUSTEN_DIR,
    ], ["Rdata.rdb", "Rdata.rdx"], install_hint("austen"))


def austen_text(folder: Path) -> str:
    books = read_r_lazyload(folder, AUSTEN_BOOKS)
    return "\n\n".join("\n".join(str(line) for line in books[b]) for b in AUSTEN_BOOKS)


def load_austen(cfg: AustenConfig) -> TokenSplits:
    folder = locate_austen(cfg)
    return char_splits(austen_text(folder), cfg.val_fraction, f"janeaustenr ({folder})", "public domain",
                       cfg.limit_chars)


def prepare_austen(source: Path | None) -> str:
    folder = locate_austen(AustenConfig(path=str(source) if source else None))
    if source:
        link_local("austen", folder)
    return f"austen: {folder} ({len(austen_text(folder))} characters in six novels)"


# ---- GPT-2 token shards: modded-nanogpt (256 x int32 header, then uint16) or nanoGPT (raw uint16) -------

MODDED_MAGIC, MODDED_VERSION, HEADER_INTS = 20240520, 1, 256


def read_shard(path: Path, fmt: str) -> np.ndarray:
    """Memory-map one shard; the header (modded-nanogpt's `_load_data_shard`) is checked, not trusted."""
    size = path.stat().st_size
    if fmt == "nanogpt":
        if size % 2:
            raise DataMissing(f"{path}: {size} bytes is not a whole number of uint16 tokens")
        return np.memmap(path, dtype=np.uint16, mode="r")
    header = np.fromfile(path, dtype=np.int32, count=HEADER_INTS)
    if header.shape[0] < HEADER_INTS or header[0] != MODDED_MAGIC:
        raise DataMissing(f"{path}: no modded-nanogpt header (magic {header[0] if header.size else None}, "
                          f"want {MODDED_MAGIC}); for raw nanoGPT files set data.format: nanogpt")
    if header[1] != MODDED_VERSION:
        raise DataMissing(f"{path}: header version {header[1]}, this reader knows {MODDED_VERSION}")
    n = int(header[2])
    if size != HEADER_INTS * 4 + 2 * n:
        raise DataMissing(f"{path}: header says {n} tokens ({HEADER_INTS * 4 + 2 * n} bytes), file is {size}")
    return np.memmap(path, dtype=np.uint16, mode="r", offset=HEADER_INTS * 4, shape=(n,))


def write_shard(path: Path, tokens: np.ndarray, fmt: str = "modded") -> None:
    """The writer that matches read_shard (what modded-nanogpt's data/fineweb.py writes)."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= 2**16):
        raise ValueError("token ids must fit in uint16")
    with open(path, "wb") as f:
        if fmt == "modded":
            header = np.zeros(HEADER_INTS, dtype=np.int32)
            header[:3] = (MODDED_MAGIC, MODDED_VERSION, tokens.size)
            f.write(header.tobytes())
        f.write(tokens.astype(np.uint16).tobytes())


def locate_shards(cfg: ShardConfig) -> tuple[Path, list[Path], list[Path]]:
    base = [Path(cfg.path) if cfg.path else None, named_dir("fineweb10B"), named_dir("gpt2_shards")]
    for cand in base:
        if cand is None:
            continue
        train, val = glob_in(cand, cfg.train_glob), glob_in(cand, cfg.val_glob)
        if train and val:
            return Path(cand), train[: cfg.max_train_shards], val
    tried = ", ".join(str(c) for c in base if c is not None)
    raise DataMissing(f"GPT-2 token shards ({cfg.train_glob}, {cfg.val_glob}) not found in {tried}. To get them: "
                      + local_hint("fineweb10B"))


def load_shards(cfg: ShardConfig) -> TokenSplits:
    folder, train, val = locate_shards(cfg)
    return TokenSplits([read_shard(p, cfg.format) for p in train], [read_shard(p, cfg.format) for p in val],
                       meta={"vocab_size": cfg.vocab_size, "source": str(folder), "shards": len(train),
                             "order": cfg.order})


def prepare_shards(source: Path | None) -> str:
    if source is None:
        raise DataMissing("the FineWeb shards are not downloaded by trainbench (~20 GB); make them with "
                          "modded-nanogpt's data/cached_fineweb10B.py, then `trainbench data prepare fineweb10B "
                          "--from FOLDER`")
    folder, train, val = locate_shards(ShardConfig(path=str(source)))
    n = sum(read_shard(p, "modded").shape[0] for p in train)
    link_local("fineweb10B", folder)
    return f"fineweb10B: {folder} ({len(train)} train shards, {n} tokens; {len(val)} val shards)"


PYDOC_TOPICS = Component(CharConfig, load=load_pydoc_topics)
AUSTEN = Component(AustenConfig, load=load_austen, prepare=prepare_austen)
SHARDS = Component(ShardConfig, load=load_shards, prepare=prepare_shards)

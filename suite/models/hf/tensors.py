"""The weights of a Hugging Face model folder, planned from the safetensors headers alone and then read tensor by
tensor: the one validator and the one reader behind both ways a model is filled, whole (hf_checkpoint.load_llama)
or one flat range of each parameter (hf_zero3: a ZeRO-3 rank's partition, read with safetensors' `get_slice`).

`plan` reads no weight: every shard, name, shape and dtype is checked from the file headers, so a bad folder
(a shard missing, a tensor missing, extra or of another shape, an unusable dtype) raises `CheckpointError` before
any model is built. Each suite parameter is a list of `Source`s concatenated in flat order: one on-disk tensor, a
row range of MLPerf's fused `qkv_proj`, a half of a stacked `gate_up_proj`, or Mixtral's per-expert tensors
(`block_sparse_moe.experts.E.w1/w2/w3`) stacked. A model with `fused_qkv` takes `qkv_proj` whole into its `wqkv`,
or separate q/k/v_proj concatenated (rows [q; k; v]). `Reads` counts the checkpoint bytes a reader's tensors hold.
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from suite.data.base import DataMissing
from suite.models.hf.names import to_hf_state_dict
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama

CONFIG, SINGLE, INDEX = "config.json", "model.safetensors", "model.safetensors.index.json"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}
# safetensors' header dtype names -> torch's (those torch has)
_STORED = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
           "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "I64": torch.int64, "I32": torch.int32,
           "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}
_MIXTRAL_EXPERT = re.compile(r"model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.(w[123])\.weight")
_MIXTRAL_GATE = re.compile(r"model\.layers\.(\d+)\.block_sparse_moe\.gate\.weight")
# MLPerf llama2_70b_lora's base ("Llama2-70b-fused-qkv-mlperf") stores q, k and v as one matrix, rows [q; k; v]
_FUSED_QKV = re.compile(r"model\.layers\.(\d+)\.self_attn\.qkv_proj\.(weight|bias)")


class CheckpointError(DataMissing):
    """A checkpoint folder that cannot give the model the spec asks for; the message names the file and what to do."""


def weight_files(folder: Path) -> list[Path]:
    """model.safetensors, or every shard the index names (each must be there)."""
    import json

    if (folder / INDEX).is_file():
        try:
            weight_map = json.loads((folder / INDEX).read_text(encoding="utf-8"))["weight_map"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{folder / INDEX}: not a safetensors index with a weight_map ({e})") from None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError(f"{folder / INDEX}: weight_map must map tensor names to shard file names")
        shards = sorted(set(weight_map.values()))
        # a shard is a file of this folder: an absolute path or a `..` would read outside it (issue 50 item 9);
        # judged by the name, so shards linked into a cache (the Hugging Face hub's snapshots) still load
        outside = [s for s in shards if Path(s).is_absolute() or ".." in Path(s).parts or not s.strip()]
        if outside:
            raise CheckpointError(f"{folder / INDEX}: weight_map names shard(s) {', '.join(map(repr, outside))} "
                                  f"outside the checkpoint folder {folder}; a shard is a file name inside it")
        missing = [s for s in shards if not (folder / s).is_file()]
        if missing:
            raise CheckpointError(f"{folder / INDEX} names shard(s) {', '.join(missing)} that are not in {folder} "
                                  "(a partial download or copy): copy the missing files, or the whole folder again")
        return [folder / s for s in shards]
    if (folder / SINGLE).is_file():
        return [folder / SINGLE]
    raise CheckpointError(f"{folder} has neither {SINGLE} nor {INDEX}: only safetensors checkpoints are read "
                          "(convert .bin / .pth with save_pretrained(safe_serialization=True))")


def check_dtype(dtype: torch.dtype | str, device: torch.device, where: str) -> None:
    """A tensor dtype this model can compute in, on this device; else the file and what to do."""
    if dtype not in DTYPES.values():
        raise CheckpointError(f"{where}: dtype {dtype} is not one this model computes in "
                              f"({', '.join(DTYPES)}): dequantize the checkpoint first")
    if dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise CheckpointError(f"{where}: bfloat16 weights, and {torch.cuda.get_device_name(device)} has no "
                              "bfloat16: set model.dtype: float32 (or float16) to cast them on load")
    if dtype == torch.float64 and device.type in ("mps", "npu"):
        raise CheckpointError(f"{where}: float64 weights, which {device.type} cannot hold: set model.dtype: float32")


# ---- the plan: from the headers, every check ------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One on-disk tensor, or the part of it `select` picks (a slice per dimension; () = all of it)."""

    path: Path
    name: str
    shape: tuple[int, ...]  # as selected
    select: tuple[slice, ...] = ()

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Entry:
    """A suite tensor: its sources concatenated in flat order (stacked along a new first dim when several)."""

    hf_name: str  # what messages call it
    path: Path
    sources: tuple[Source, ...]
    stored: str  # the header's dtype name

    concat: bool = False  # several sources joined along their first dim (q, k, v into wqkv), not stacked

    @property
    def shape(self) -> tuple[int, ...]:
        first = self.sources[0].shape
        if len(self.sources) == 1:
            return first
        return (sum(s.shape[0] for s in self.sources), *first[1:]) if self.concat else (len(self.sources), *first)

    @property
    def numel(self) -> int:
        return sum(s.numel for s in self.sources)


def _headers(folder: Path) -> dict[str, tuple[Path, tuple[int, ...], str]]:
    """name -> (file, shape, dtype name) of every tensor in the folder, from the headers (no weight read)."""
    from safetensors import SafetensorError, safe_open

    out = {}
    for path in weight_files(folder):
        try:
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                    s = f.get_slice(name)
                    out[name] = (path, tuple(s.get_shape()), s.get_dtype())
        except (SafetensorError, OSError) as e:
            raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None
    return out


def _entries(stored: dict[str, tuple[Path, tuple[int, ...], str]], cfg: llama_config.Config) -> dict[str, Entry]:
    """Each on-disk tensor placed as (part of) a suite tensor: fused qkv split, gate_up halved, experts stacked."""
    out: dict[str, Entry] = {}
    experts: dict[tuple[int, str], dict[int, str]] = {}
    for name, (path, shape, dtype) in stored.items():
        if name.endswith("rotary_emb.inv_freq"):  # derived from the config, not a weight
            continue
        if m := _MIXTRAL_EXPERT.fullmatch(name):
            experts.setdefault((int(m[1]), m[3]), {})[int(m[2])] = name
            continue
        if m := _FUSED_QKV.fullmatch(name):
            sizes = list(cfg.qkv_sizes)
            if shape[0] != sum(sizes):
                raise CheckpointError(f"{path}: tensor {name} has {shape[0]} rows, q + k + v of the model config.json "
                                      f"describes need {sum(sizes)} ({' + '.join(map(str, sizes))})")
            if cfg.fused_qkv:  # the model's wqkv is this matrix: read whole, not split
                out[f"layers.{m[1]}.attention.wqkv.{m[2]}"] = Entry(name, path, (Source(path, name, shape),), dtype)
                continue
            row = 0
            for proj, size in zip(("wq", "wk", "wv"), sizes, strict=True):
                select = (slice(row, row + size), *(slice(None),) * (len(shape) - 1))
                src = Source(path, name, (size, *shape[1:]), select)
                out[f"layers.{m[1]}.attention.{proj}.{m[2]}"] = Entry(name, path, (src,), dtype)
                row += size
            continue
        hf_name = f"model.layers.{m[1]}.mlp.gate.weight" if (m := _MIXTRAL_GATE.fullmatch(name)) else name
        try:
            target = llama.suite_name(hf_name)
        except KeyError:
            raise CheckpointError(f"{path}: tensor {name} has no place in the {cfg.n_layer}-layer model "
                                  "(llama.HF_TO_SUITE): a checkpoint of another architecture or layout") from None
        if target.endswith("w1+w3") and len(shape) == 3:  # stacked (E, 2*hidden, dim) = [w1; w3] along dim 1
            half = -(-shape[1] // 2)  # as torch.chunk: an odd width gives halves of two widths, refused below
            for i, w in enumerate(("w1", "w3")):
                width = min(half, shape[1] - i * half)
                src = Source(path, name, (shape[0], width, shape[2]), (slice(None), slice(i * half, i * half + width)))
                out[target[: -len("w1+w3")] + w] = Entry(name, path, (src,), dtype)
            continue
        out[target] = Entry(name, path, (Source(path, name, shape),), dtype)
    if cfg.fused_qkv:
        _join_qkv(out, cfg)
    for layer in sorted({layer for layer, _ in experts}):
        present = {w: by_expert for (at, w), by_expert in experts.items() if at == layer}
        n = 1 + max(e for by_expert in present.values() for e in by_expert)
        missing = [f"model.layers.{layer}.block_sparse_moe.experts.{e}.{w}.weight" for e in range(n)
                   for w in ("w1", "w2", "w3") if e not in present.get(w, {})]
        if missing:
            folder = stored[next(iter(next(iter(present.values())).values()))][0].parent
            raise CheckpointError(f"tensor {missing[0]} is in no file of {folder} ({len(missing)} "
                                  "expert tensors missing): the checkpoint is incomplete")
        for w in ("w1", "w2", "w3"):
            names = [present[w][e] for e in range(n)]
            srcs = tuple(Source(stored[x][0], x, stored[x][1]) for x in names)
            odd = next((s for s in srcs if s.shape != srcs[0].shape), None)
            if odd is not None:
                raise CheckpointError(f"{odd.path}: tensor {odd.name} has shape {odd.shape}, expert 0's has "
                                      f"{srcs[0].shape}: the experts of one layer must all have one shape")
            out[f"layers.{layer}.moe.experts.{w}"] = Entry(f"model.layers.{layer}.block_sparse_moe.experts.*.{w}.weight",
                                                           srcs[0].path, srcs, stored[names[0]][2])
    return out


def _join_qkv(out: dict[str, Entry], cfg: llama_config.Config) -> None:
    """A `fused_qkv` model from separate q/k/v_proj: each layer's three entries become one wqkv entry reading
    them in turn (rows [q; k; v]); each part checked against its own rows, a missing one named."""
    for name in [n for n in out if re.fullmatch(r"layers\.\d+\.attention\.wq\.(weight|bias)", n)]:
        prefix, kind = name.rsplit(".wq.", 1)
        fused = f"{prefix}.wqkv.{kind}"
        if fused in out:  # the folder has qkv_proj too: its q/k/v_proj are left to be refused as extra
            continue
        parts = [f"{prefix}.{w}.{kind}" for w in ("wq", "wk", "wv")]
        for part, size in zip(parts, cfg.qkv_sizes, strict=True):
            if part not in out:
                hf = out[name].hf_name.replace("q_proj", f"{part.split('.')[-2][1]}_proj")
                raise CheckpointError(f"tensor {hf} is in no file of {out[name].path.parent} (q_proj is): the "
                                      "checkpoint is incomplete")
            need = (size, cfg.d_model) if kind == "weight" else (size,)
            if out[part].shape != need:
                raise CheckpointError(f"{out[part].path}: tensor {out[part].hf_name} has shape {out[part].shape}, the "
                                      f"model config.json describes needs {need} (its rows of {fused})")
        entries = [out.pop(p) for p in parts]
        out[fused] = Entry(entries[0].hf_name.replace("q_proj", "{q,k,v}_proj"), entries[0].path,
                           tuple(s for e in entries for s in e.sources), entries[0].stored, concat=True)


@dataclass
class Plan:
    """What each of the model's tensors is read from, checked; `dtype` is what they load as."""

    folder: Path
    entries: dict[str, Entry]
    dtype: torch.dtype

    @contextmanager
    def open(self, reads: Reads | None = None) -> Iterator[Reader]:
        with ExitStack() as stack:
            yield Reader(self, stack, reads if reads is not None else Reads())


def plan(folder: str | Path, cfg: llama_config.Config, dtype: torch.dtype | None = None,
         runs_on: torch.device | str = "cpu") -> Plan:
    """The folder's tensors placed into the model `cfg` describes, every one checked against it from the headers:
    a CheckpointError names the file, the tensor and what to do. dtype: cast on load (None: the checkpoint's own),
    checked against `runs_on` (the device the run computes on)."""
    folder, target = Path(folder).expanduser(), torch.device(runs_on)
    if dtype is not None:
        check_dtype(dtype, target, f"model.dtype {dtype}")
    entries = _entries(_headers(folder), cfg)
    with torch.device("meta"):
        expected = {n: tuple(t.shape) for n, t in llama.Llama(cfg, llama.vocab(cfg, {})).state_dict().items()}
    if cfg.tie_embeddings and "output.weight" not in entries and "tok_embeddings.weight" in entries:
        entries["output.weight"] = entries["tok_embeddings.weight"]
    for name, e in entries.items():
        if name not in expected:
            raise CheckpointError(f"{e.path}: tensor {e.hf_name} ({e.shape}) has no place in the model config.json "
                                  f"describes ({name} does not exist): the files and config.json disagree")
        if e.shape != expected[name]:
            raise CheckpointError(f"{e.path}: tensor {e.hf_name} has shape {e.shape}, the model config.json "
                                  f"describes needs {expected[name]} ({name})")
        stored = _STORED.get(e.stored, e.stored)
        if dtype is None or stored not in DTYPES.values():  # kept as stored: the run's device must compute in it
            check_dtype(stored, target, f"{e.path}: tensor {e.hf_name}")
    missing = [n for n in expected if n not in entries]
    if missing:
        like = torch.empty(expected[missing[0]], device="meta")
        raise CheckpointError(f"tensor {next(iter(to_hf_state_dict({missing[0]: like}, cfg)))} (shape "
                              f"{expected[missing[0]]}) is in no file of {folder} ({len(missing)} missing): the "
                              "checkpoint is incomplete")
    ordered = {n: entries[n] for n in expected}
    return Plan(folder, ordered, dtype or _STORED[next(iter(entries.values())).stored])


# ---- reading ---------------------------------------------------------------------------------------------------


@dataclass
class Reads:
    """Bytes of checkpoint data held at once by the tensors a Reader made: a view of a file's mapping (safetensors
    maps the file; a tensor read is a view of it) counts the elements it selects, the pages its reader touches;
    a copy (a strided selection, experts joined, a dtype cast) counts its storage until its last view is gone.
    `peak` is what a loader held beyond the model's own storage; `total` what it read in all."""

    live: int = 0
    peak: int = 0
    total: int = 0
    _keys: set[int] = field(default_factory=set)

    def track(self, t: torch.Tensor, mapped: bool = False) -> torch.Tensor:
        owner = t if mapped else (t._base if t._base is not None else t)
        key = id(owner)
        if key not in self._keys:
            nbytes = t.numel() * t.element_size() if mapped else owner.untyped_storage().nbytes()
            self._keys.add(key)
            self.live += nbytes
            self.total += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(owner, self._free, key, nbytes)
        return t

    def _free(self, key: int, nbytes: int) -> None:
        self._keys.discard(key)
        self.live -= nbytes


def _check_finite(t: torch.Tensor, where: str, first: int) -> None:
    """NaN or inf in a checkpoint's weights is refused while loading (untimed init, exit 2), naming the file, the
    tensor and the element, instead of a run recorded `diverged` at its first step."""
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        at = int(torch.nonzero(~torch.isfinite(t.reshape(-1)))[0]) + first
        raise CheckpointError(f"{where} holds {t.reshape(-1)[at - first].item()} at element {at} (flat index): "
                              "the checkpoint is corrupt or was saved from a diverged run; use a clean copy")


class Reader:
    """A plan's tensors read from the files it names (each opened once), whole or as a flat element range."""

    def __init__(self, plan: Plan, stack: ExitStack, reads: Reads):
        self.plan, self.reads, self._stack = plan, reads, stack
        self._files: dict[Path, Any] = {}

    def _file(self, path: Path) -> Any:
        if path not in self._files:
            from safetensors import safe_open

            self._files[path] = self._stack.enter_context(safe_open(str(path), framework="pt"))
        return self._files[path]

    def _rows(self, src: Source, start: int, stop: int) -> tuple[torch.Tensor, bool]:
        """Elements [start, stop) of the source flattened, reading only the rows (first dim) that hold them; and
        whether they are still a view of the file's mapping."""
        f = self._file(src.path)
        if not src.shape:
            t = f.get_tensor(src.name).reshape(1)
        else:
            row = math.prod(src.shape[1:])
            first, last = start // row, -(-stop // row)
            select = src.select or (slice(None),) * len(src.shape)
            base = select[0].start or 0
            t = f.get_slice(src.name)[(slice(base + first, base + last), *select[1:])]
            start, stop = start - first * row, stop - first * row
        flat = t.reshape(-1)
        if flat.untyped_storage().data_ptr() != t.untyped_storage().data_ptr():  # a strided selection: copied
            return self.reads.track(flat)[start:stop], False
        return flat[start:stop], True

    def _read(self, name: str, start: int, stop: int, shape: tuple[int, ...]) -> torch.Tensor:
        entry, pieces, offset = self.plan.entries[name], [], 0
        for src in entry.sources:
            lo, hi = max(start, offset), min(stop, offset + src.numel)
            if lo < hi:
                pieces.append(self._rows(src, lo - offset, hi - offset))
                _check_finite(pieces[-1][0], f"{src.path}: tensor {src.name!r}", lo - offset)
            offset += src.numel
        out, mapped = pieces[0]
        if len(pieces) > 1:  # experts stacked, or q, k, v for wqkv: the pieces (read) joined (a copy)
            for piece, in_map in pieces:
                if in_map:
                    self.reads.track(piece, mapped=True)
            out, mapped = self.reads.track(torch.cat([p for p, _ in pieces])), False
        if out.dtype != self.plan.dtype:
            out, mapped = self.reads.track(out.to(self.plan.dtype)), False
            _check_finite(out, f"{entry.sources[0].path}: tensor {name!r} cast to {self.plan.dtype}", start)
        out = out.view(shape)
        return self.reads.track(out, mapped=True) if mapped else out

    def flat(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Elements [start, stop) of suite tensor `name` flattened, in the plan's dtype."""
        return self._read(name, start, stop, (stop - start,))

    def tensor(self, name: str) -> torch.Tensor:
        entry = self.plan.entries[name]
        return self._read(name, 0, entry.numel, entry.shape)

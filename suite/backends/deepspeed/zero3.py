"""`arch: hf_llama` under DeepSpeed ZeRO-3: the model built already partitioned (`deepspeed.zero.Init`, its random
init skipped) and each rank's partition of every parameter read straight from the safetensors files, so no rank
ever holds the whole model: a rank holds its partitions plus one slice of one tensor (its share of it and at most
two rows more) at a time. 70B in bf16 is 140 GB whole; 17.5 GB a rank over 8.

Each rank copies its own flat partition (`param.ds_tensor`, elements [rank * size, (rank + 1) * size) of the
flattened tensor, DeepSpeed's `_partition_param` layout) from the rows of the on-disk tensor that hold it
(`get_slice`): no communication, and no rank reads more than its share. The alternative,
`GatheredParameters(modifier_rank=0)` per parameter, gathers the whole tensor on every rank and broadcasts rank 0's
read of it: more memory a rank, a collective per tensor. The names, shapes and every CheckpointError are the
whole-model path's (hf_tensors.plan), raised before the model is built.

The DeepSpeed backend sets `zero3_build` around `workload.build_model()` at zero_stage 3; a model without a
checkpoint builds as before. LoRA adapters are injected afterwards, outside zero.Init (suite/models/common/lora.py):
DeepSpeed's engine partitions them with the rest at `deepspeed.initialize`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from suite.models.common.layers import Rotary
from suite.models.hf import pretrained
from suite.models.hf import tensors as hf_tensors
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama

# (the deepspeed module, the ds_config, the engine's half dtype or None) while the backend builds under ZeRO-3
_BUILD: ContextVar[tuple[Any, dict[str, Any], torch.dtype | None] | None] = ContextVar("zero3_build", default=None)
_INIT_FILLS = ("normal_", "uniform_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_", "xavier_normal_",
               "trunc_normal_", "ones_", "zeros_", "constant_")


@contextmanager
def zero3_build(deepspeed: Any, config: dict[str, Any], half: torch.dtype | None) -> Iterator[None]:
    """While the DeepSpeed backend builds the model at ZeRO stage 3: a model that fills itself from a checkpoint
    builds partitioned (`half`: the engine's bf16/fp16, which it would cast the weights to anyway)."""
    token = _BUILD.set((deepspeed, config, half))
    loader = pretrained.PARTITIONED_LOADER.set(load_partitioned)
    try:
        yield
    finally:
        pretrained.PARTITIONED_LOADER.reset(loader)
        _BUILD.reset(token)


def active() -> bool:
    return _BUILD.get() is not None


@contextmanager
def _no_init() -> Iterator[None]:
    """torch.nn.init's fills as no-ops while the model is built: every parameter is overwritten from the
    checkpoint (the plan has checked that each one is there), and N(0, 0.02) of 70B values on every rank is time."""
    saved = {name: getattr(nn.init, name) for name in _INIT_FILLS}
    for name in _INIT_FILLS:
        setattr(nn.init, name, lambda t, *a, **k: t)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(nn.init, name, fn)


def zero_init(deepspeed: Any, config: dict[str, Any], dtype: torch.dtype) -> Any:
    """`deepspeed.zero.Init` that builds its partitions in `dtype` on every CPU. DeepSpeed 0.19.8's
    `Init._set_dtype` reads an explicit dtype as `dtype or fp16 if accelerator.is_fp16_supported() else bf16 if
    accelerator.is_bf16_supported else fp32`, which Python groups as `(dtype or fp16) if ... else (...)`: the
    dtype passed is kept only where the accelerator supports fp16. On CPU that is oneDNN's fp16 (AVX512-FP16 or
    AMX-FP16: Intel Sapphire Rapids and later); on every other x86 CPU (AVX2-only AMD or Intel, AMD Zen 4/5, or any
    CPU under ONEDNN_MAX_CPU_ISA=AVX2) it falls through to bf16 (`is_bf16_supported` is not called, and a method
    is true), so an fp32 checkpoint was held in bf16 partitions and its logits moved by 3.8e-2 (issue 42). The
    context reads self.dtype only when it is entered, so setting it after construction is the whole fix."""
    init = deepspeed.zero.Init(config_dict_or_path=config, dtype=dtype)
    init.dtype = dtype
    return init


def partition_range(param: Any) -> tuple[int, int]:  # a ZeRO-3 parameter (ds_tensor, ds_numel, ...)
    """[start, stop) of the flattened parameter that this rank's ds_tensor holds (the last rank's is padded)."""
    size = param.ds_tensor.ds_numel
    start = size * dist.get_rank(group=param.ds_process_group)
    return min(start, param.ds_numel), min(start + size, param.ds_numel)


def _fill(param: Any, name: str, reader: hf_tensors.Reader) -> None:
    part = param.ds_tensor
    if getattr(part, "final_location", None) is not None or hasattr(part, "ds_quant_scale"):
        raise ValueError(f"{name}: its ZeRO-3 partition is on NVMe or quantized (ds_config offload_param nvme / "
                         "zero_quantized_nontrainable_weights), which the streaming loader does not write; drop "
                         "those keys from backends.deepspeed.ds_config")
    start, stop = partition_range(param)
    if stop > start:
        part[: stop - start].copy_(reader.flat(name, start, stop))
    part[stop - start:].zero_()  # the padding of the last rank's partition


def load_partitioned(folder: str | Path, cfg: llama_config.Config, dtype: torch.dtype | None = None,
                     runs_on: torch.device | str = "cpu", reads: hf_tensors.Reads | None = None) -> llama.Llama:
    """The model `cfg` describes, built under deepspeed.zero.Init and filled partition by partition from the
    folder (what hf_checkpoint.load_llama gives whole, with the same checks). Call inside `zero3_build`."""
    build = _BUILD.get()
    if build is None:
        raise RuntimeError("load_partitioned runs inside zero3_build (the DeepSpeed backend's ZeRO-3 build)")
    deepspeed, config, half = build
    plan = hf_tensors.plan(folder, cfg, dtype, runs_on)  # every CheckpointError before anything is built
    if not deepspeed.comm.is_initialized():  # zero.Init reads the world from deepspeed.comm, not torch's group
        deepspeed.init_distributed(dist_backend=dist.get_backend(), auto_mpi_discovery=False)
    dtype = half or plan.dtype
    default = torch.get_default_dtype()
    # each module's parameters are made whole, then partitioned: made in the load dtype, not made in fp32 and
    # cast (zero.Init's tensor override casts after the fact: a bf16 model's transient would be 3x its size)
    torch.set_default_dtype(dtype)
    try:
        with _no_init(), zero_init(deepspeed, config, dtype):
            model = llama.Llama(cfg, llama.vocab(cfg, {}))
    finally:
        torch.set_default_dtype(default)
    kept = {p.ds_tensor.dtype for p in model.parameters()}
    if kept != {dtype}:  # never round a checkpoint silently: the partitions hold what the plan reads, in its dtype
        raise RuntimeError(f"deepspeed.zero.Init built partitions in {sorted(map(str, kept))}, not the load dtype "
                           f"{dtype} (suite/backends/deepspeed/zero3.py zero_init)")
    with plan.open(reads) as reader, torch.no_grad():
        for name, param in model.named_parameters():  # tied embeddings: the one parameter, once
            _fill(param, name, reader)
        for name, buf in model.named_buffers():  # persistent ones (DeepSeek's score bias): whole on every rank
            if name in plan.entries:
                buf.copy_(reader.tensor(name))
    model.rotary = Rotary(cfg.head_size, cfg.rope_theta, cfg.rope_scaling)  # fp32 tables, as HF's
    return model

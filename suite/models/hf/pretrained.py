"""`arch: hf_llama`: the Llama-class decoder (suite/models/llama/model.py) started from a Hugging Face checkpoint folder
(suite/models/hf/checkpoint.py), optionally with LoRA adapters and a frozen base (suite/models/common/lora.py).

The spec's model block declares the shape (a preset or the fields, as for `arch: llama`): FLOPs, parameter counts
and the memory estimate come from it without the checkpoint, and loading checks that config.json agrees. Loading
is untimed init; a bad folder is refused before the clock (exit 2, nothing recorded). Under DeepSpeed ZeRO-3 the
model is built partitioned and each rank reads only its partitions (suite/backends/deepspeed/zero3.py).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from torch import nn

from suite.models.common import lora as lora_mod
from suite.models.hf import checkpoint as hf_checkpoint
from suite.models.hf import tensors as hf_tensors
from suite.models.hf.config import Config
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama
from suite.registry import Component

# A backend that builds the model already partitioned installs its loader here while it builds (DeepSpeed ZeRO-3:
# suite/backends/deepspeed/zero3.py `zero3_build`), so this module needs no backend: models sit below backends.
PARTITIONED_LOADER: ContextVar[Callable[..., nn.Module] | None] = ContextVar("partitioned_loader", default=None)


def checkpoint_path(cfg: Config, meta: dict[str, Any] | None = None) -> Path | None:
    if cfg.checkpoint is None:
        return None
    if cfg.checkpoint == "data":
        if not (meta or {}).get("checkpoint"):
            raise hf_tensors.CheckpointError("model.checkpoint: data, but the data set provides no checkpoint; "
                                                "give the path of a Hugging Face model folder")
        return Path((meta or {})["checkpoint"])
    from suite.data.locate import data_root

    path = Path(cfg.checkpoint).expanduser()
    return path if path.is_absolute() else data_root() / path


def shape(cfg: Config) -> llama_config.Config:
    """The plain llama.Config of the declared shape."""
    return llama_config.Config(**cfg.model_dump(exclude={"checkpoint", "dtype", "lora", "preset"}))


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    base_cfg = shape(cfg)
    path = checkpoint_path(cfg, meta)
    if path is None:
        model: nn.Module = llama.build(base_cfg, meta)
    else:
        loaded_cfg = hf_checkpoint.config_for(path, base_cfg)
        data_vocab = meta.get("vocab_size")
        ckpt_vocab = llama.vocab(loaded_cfg, {})
        # meta vocab_padded: the tokenizer's ids need only fit the embedding (Qwen2 pads it past the tokenizer)
        if data_vocab and (int(data_vocab) > ckpt_vocab
                           or (int(data_vocab) != ckpt_vocab and not meta.get("vocab_padded"))):
            raise hf_tensors.CheckpointError(
                f"the data's tokenizer ({meta.get('tokenizer', meta.get('source', 'the data set'))}) has "
                f"{data_vocab} tokens but the checkpoint {path} has a vocabulary of {llama.vocab(loaded_cfg, {})}: "
                "tokenize the data with the checkpoint's own tokenizer.json")
        from suite import devices

        dtype = hf_tensors.DTYPES[cfg.dtype] if cfg.dtype else None
        partitioned = PARTITIONED_LOADER.get()
        if partitioned is not None:  # DeepSpeed ZeRO-3: built partitioned, each rank reading only its partitions
            model = partitioned(path, loaded_cfg, dtype=dtype, runs_on=devices.current().torch)
        else:  # loaded on the host (the backend moves it); its dtype checked against the device the run computes on
            model = hf_checkpoint.load_llama(path, loaded_cfg, dtype=dtype, runs_on=devices.current().torch)
    if cfg.lora is not None:
        model = lora_mod.apply(model, cfg.lora)
    return model


def flops_per_token(cfg: Config, meta: dict[str, Any]) -> float:
    if cfg.lora is None:
        return llama.flops_per_token(cfg, meta)
    return lora_mod.flops_per_token(cfg, cfg.lora, meta)


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    return flops_per_token(cfg, meta) * cfg.seq_len


def flops_by_class(cfg: Config, meta: dict[str, Any]) -> dict[str, float]:
    attention = llama.attention_flops_per_token(cfg) * cfg.seq_len
    return {"matmul": flops_per_sample(cfg, meta) - attention, "attention": attention}


def param_count(cfg: Config, meta: dict[str, Any]) -> int:
    n = llama.param_count(cfg, meta)
    return n + (lora_mod.adapter_param_count(cfg, cfg.lora, llama.vocab(cfg, meta)) if cfg.lora else 0)


def active_matmul_params(cfg: Config, meta: dict[str, Any]) -> int:
    """N of 6N (llama.active_matmul_params), the LoRA adapters' matrices added where there are any."""
    n = llama.active_matmul_params(cfg, meta)
    return n + (lora_mod.adapter_param_count(cfg, cfg.lora, llama.vocab(cfg, meta)) if cfg.lora else 0)


COMPONENT = Component(Config, build=build, flops_per_sample=flops_per_sample, flops_per_token=flops_per_token,
                      param_count=param_count, flops_by_class=flops_by_class, active_matmul_params=active_matmul_params)

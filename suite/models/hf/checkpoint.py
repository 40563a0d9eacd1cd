"""Hugging Face model folders (config.json + model.safetensors, or shards listed by model.safetensors.index.json)
read into the suite's Llama-class decoder (suite/models/llama/model.py) and written back in the same format.

Architectures: those of the registered families (suite/models/families.py; each family's folder declares the names
it reads, its traits and the rest of its config.json translation): e.g. `LlamaForCausalLM` (dense),
`Qwen2ForCausalLM` (`qkv_bias`) and `MixtralForCausalLM` (softmax top-k MoE; on disk its experts are stored one by
one, `block_sparse_moe.experts.E.w1/w2/w3`, and stacked here). This module names no family: a saved model is
written as the family whose traits are the model's. Names go through llama.HF_TO_SUITE.
A `fused_qkv` model (the spec's choice, not the folder's) reads MLPerf's fused `qkv_proj` whole into its `wqkv`, or
separate q/k/v_proj concatenated; it is saved as separate q/k/v_proj, the layout transformers reads.
Everything that can be wrong with a folder (missing, partial, another architecture, a shape the spec does not
declare, a tensor missing, extra or of another shape, a dtype the device cannot hold) raises `CheckpointError`, a
`DataMissing`: found during the untimed init, the run is refused (exit 2) and nothing is recorded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from suite.data.base import json_object
from suite.models import families
from suite.models.common.layers import Rotary
from suite.models.family import Family, count
from suite.models.hf import tensors as hf_tensors
from suite.models.hf.names import to_hf_state_dict
from suite.models.hf.tensors import (
    CONFIG,
    INDEX,
    SINGLE,
    CheckpointError,
)
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama

# ---- config.json -------------------------------------------------------------------------------------------


def read_config(folder: str | Path) -> dict[str, Any]:
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist: give model.checkpoint the path of a "
                              "Hugging Face model folder (config.json + *.safetensors), or set TRAINBENCH_DATA")
    return json_object(folder / CONFIG, CheckpointError,
                       "a Hugging Face model folder has a config.json beside its weights (save it with "
                       "save_pretrained)")


def architecture(hf: dict[str, Any], path: Path) -> Family:
    """The registered family that reads the folder's `architectures`."""
    archs, known = hf.get("architectures") or [], families.architectures()
    found = [known[a] for a in archs if a in known]
    if len(found) != 1:
        raise CheckpointError(f"{path}: architectures {archs} (model_type {hf.get('model_type')!r}) is not one this "
                              f"loader reads ({', '.join(known)}); convert the checkpoint or choose a "
                              "Llama-class one")
    return found[0]


def _rope(hf: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """transformers 5's `rope_parameters`, or the older top-level `rope_theta` + `rope_scaling`."""
    params = hf.get("rope_parameters") or {**(hf.get("rope_scaling") or {}), "rope_theta": hf.get("rope_theta")}
    theta = float(params.get("rope_theta") or 10000.0)
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind == "default":
        return theta, None
    if kind != "llama3":
        raise ValueError(f"rope type {kind!r} (only default and Llama 3.1's llama3 are implemented)")
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    return theta, {k: params[k] for k in keys}


def suite_fields(hf: dict[str, Any], path: Path) -> dict[str, Any]:
    """config.json -> llama.Config's shape fields (seq_len is the training context: the spec's, not the file's).
    Every size is checked to be a whole number >= 1 first (issue 50 item 8), so a hostile or broken file is
    refused naming the field, never a ZeroDivisionError or OverflowError during the run."""
    family = architecture(hf, path)
    try:
        if hf.get("hidden_act", "silu") != "silu" or hf.get("mlp_bias"):
            raise ValueError(f"hidden_act {hf.get('hidden_act')!r}, mlp_bias {hf.get('mlp_bias')} (SwiGLU with silu "
                             "and no MLP bias is implemented)")
        theta, scaling = _rope(hf)
        n_head, d_model = count(hf, "num_attention_heads"), count(hf, "hidden_size")
        fields: dict[str, Any] = {
            "n_layer": count(hf, "num_hidden_layers"), "d_model": d_model, "n_head": n_head,
            "n_kv_head": count(hf, "num_key_value_heads") if hf.get("num_key_value_heads") else n_head,
            "head_dim": count(hf, "head_dim") if hf.get("head_dim") else d_model // n_head,
            "ffn_dim": count(hf, "intermediate_size"), "vocab_size": count(hf, "vocab_size"), "rope_theta": theta,
            "rope_scaling": scaling, "norm_eps": float(hf.get("rms_norm_eps", 1e-5)),
            "attention_bias": bool(hf.get("attention_bias", False)), "qkv_bias": False,
            "tie_embeddings": bool(hf.get("tie_word_embeddings", False)), **family.fields()}
        if family.read is not None:  # the rest of the family's translation (an MoE block, a refused field)
            family.read(hf, fields)
    except KeyError as e:
        raise CheckpointError(f"{path}: field {e} is missing ({family.name} config)") from None
    except (TypeError, ValueError, ArithmeticError) as e:
        raise CheckpointError(f"{path}: {e}") from None
    if fields["head_dim"] < 1:
        raise CheckpointError(f"{path}: hidden_size {fields['d_model']} / num_attention_heads {n_head} leaves no "
                              "head dimension (give head_dim, or fix the two fields)")
    return fields


_COMPARED = ("n_layer", "d_model", "n_head", "kv_heads", "head_size", "ffn_dim", "vocab_size", "rope_theta",
             "rope_scaling", "norm_eps", "attention_bias", "qkv_bias", "qk_norm", "tie_embeddings", "moe")


def config_for(folder: str | Path, declared: llama_config.Config | None = None, seq_len: int | None = None) -> llama_config.Config:
    """The checkpoint's shape as a llama.Config. With `declared` (the spec's model block), every shape field it
    sets must agree with config.json: a mismatch names the field and both values."""
    folder = Path(folder).expanduser()
    fields = suite_fields(read_config(folder), folder / CONFIG)
    if declared is None:
        return llama_config.Config(**fields, seq_len=seq_len or 2048)
    # the spec's own choices, not the checkpoint's shape: the context, the init, one fused q/k/v linear or three
    ckpt = llama_config.Config(**fields, seq_len=declared.seq_len, init_std=declared.init_std, fused_qkv=declared.fused_qkv)
    for name in _COMPARED:
        mine, theirs = getattr(declared, name), getattr(ckpt, name)
        if name == "vocab_size" and mine is None:
            continue
        if name == "moe" and mine is not None and theirs is not None:  # the aux weight is the spec's to choose
            theirs = theirs.model_copy(update={"aux_loss_coeff": mine.aux_loss_coeff})
        if mine != theirs:
            raise CheckpointError(f"{folder / CONFIG}: {name} is {theirs!r} in the checkpoint but {mine!r} in the "
                                  f"spec's model block; fix model.{name} (or its preset) or choose the checkpoint "
                                  "of that shape")
    return ckpt if declared.moe is None else ckpt.model_copy(update={"moe": declared.moe})


# ---- load and save -------------------------------------------------------------------------------------------


def load_llama(folder: str | Path, cfg: llama_config.Config, dtype: torch.dtype | None = None,
               device: torch.device | str = "cpu", runs_on: torch.device | str | None = None,
               reads: hf_tensors.Reads | None = None) -> llama.Llama:
    """The model `cfg` describes (see config_for) holding the folder's weights, on `device`. dtype: cast on load
    (None: the checkpoint's own), checked against `runs_on` (the device the run computes on; default `device`).
    Every tensor checked from the file headers first (hf_tensors.plan), then the model built on the meta device
    (no random init) and filled one tensor at a time: the whole model and one checkpoint tensor at once.
    Under DeepSpeed ZeRO-3 each rank reads only its partitions instead (hf_zero3)."""
    device = torch.device(device)
    plan = hf_tensors.plan(folder, cfg, dtype, runs_on if runs_on is not None else device)
    with torch.device("meta"):
        model = llama.Llama(cfg, llama.vocab(cfg, {}))
    model = model.to_empty(device=device).to(plan.dtype)
    with plan.open(reads) as reader, torch.no_grad():
        for name, dest in model.state_dict().items():
            dest.copy_(reader.tensor(name))
    model.rotary = Rotary(cfg.head_size, cfg.rope_theta, cfg.rope_scaling).to(device)  # fp32 tables, as HF's
    if cfg.tie_embeddings:  # to_empty gave each name its own tensor
        model.output.weight = model.tok_embeddings.weight
    return model


def hf_config(cfg: llama_config.Config, dtype: torch.dtype) -> dict[str, Any]:
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling is not None:
        rope = {"rope_type": "llama3", "rope_theta": cfg.rope_theta, **cfg.rope_scaling.model_dump()}
    out: dict[str, Any] = {
        "architectures": [], "model_type": None, "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layer, "num_attention_heads": cfg.n_head, "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_size, "intermediate_size": cfg.ffn_dim, "vocab_size": llama.vocab(cfg, {}),
        "max_position_embeddings": cfg.seq_len, "rms_norm_eps": cfg.norm_eps, "rope_parameters": rope,
        "rope_theta": cfg.rope_theta, "attention_bias": cfg.attention_bias, "mlp_bias": False,
        "hidden_act": "silu", "tie_word_embeddings": cfg.tie_embeddings, "attention_dropout": 0.0,
        "dtype": str(dtype).removeprefix("torch.")}
    family = families.for_traits(cfg)  # the one registered family whose traits are the model's
    out.update(architectures=[family.architectures[0]], model_type=family.model_type)
    if family.write is not None:
        family.write(cfg, out)
    return out


def save_llama(model: llama.Llama, folder: str | Path, max_shard_bytes: int | None = None) -> Path:
    """config.json + model.safetensors (or shards + model.safetensors.index.json past max_shard_bytes), as
    transformers' save_pretrained writes them; transformers' from_pretrained reads the folder. A `fused_qkv`
    model's wqkv is written as separate q/k/v_proj (Hugging Face's Llama layout, whatever layout it was loaded
    from: transformers has no fused-qkv Llama); load_llama reads it back into wqkv."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v for k, v in model.state_dict().items()}
    if model.cfg.tie_embeddings:
        state.pop("output.weight", None)
    hf = {k: v.detach().contiguous().cpu() for k, v in to_hf_state_dict(state, model.cfg).items()}
    dtype = next(iter(hf.values())).dtype
    (folder / CONFIG).write_text(json.dumps(hf_config(model.cfg, dtype), indent=2) + "\n", encoding="utf-8")
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name in sorted(hf):
        nbytes = hf[name].numel() * hf[name].element_size()
        if max_shard_bytes and shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = hf[name]
        size += nbytes
    if len(shards) == 1:
        save_file(shards[0], str(folder / SINGLE), metadata={"format": "pt"})
        return folder
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, file))
    total = sum(t.numel() * t.element_size() for t in hf.values())
    (folder / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2),
                                encoding="utf-8")
    return folder

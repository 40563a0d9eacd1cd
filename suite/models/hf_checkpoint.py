"""Hugging Face model folders (config.json + model.safetensors, or shards listed by model.safetensors.index.json)
read into the suite's Llama-class decoder (suite/models/llama.py) and written back in the same format.

Architectures: `LlamaForCausalLM` (dense), `Qwen2ForCausalLM` (Llama layers with q/k/v biases and no o bias:
`qkv_bias`; small Qwen2.5 tie their embeddings) and `MixtralForCausalLM` (softmax top-k MoE; on disk its experts
are stored one by one, `block_sparse_moe.experts.E.w1/w2/w3`, and stacked here). Names go through llama.HF_TO_SUITE.
Everything that can be wrong with a folder (missing, partial, another architecture, a shape the spec does not
declare, a tensor missing, extra or of another shape, a dtype the device cannot hold) raises `CheckpointError`, a
`DataMissing`: found during the untimed init, the run is refused (exit 2) and nothing is recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from suite.data.base import DataMissing
from suite.models import llama
from suite.models.llm_layers import Rotary

CONFIG, SINGLE, INDEX = "config.json", "model.safetensors", "model.safetensors.index.json"
ARCHITECTURES = {"LlamaForCausalLM": "llama", "MixtralForCausalLM": "mixtral", "Qwen2ForCausalLM": "qwen2"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}
_MIXTRAL_EXPERT = re.compile(r"model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.(w[123])\.weight")
_MIXTRAL_GATE = re.compile(r"model\.layers\.(\d+)\.block_sparse_moe\.gate\.weight")
# MLPerf llama2_70b_lora's base ("Llama2-70b-fused-qkv-mlperf") stores q, k and v as one matrix, rows [q; k; v]
_FUSED_QKV = re.compile(r"model\.layers\.(\d+)\.self_attn\.qkv_proj\.(weight|bias)")


class CheckpointError(DataMissing):
    """A checkpoint folder that cannot give the model the spec asks for; the message names the file and what to do."""


# ---- config.json -------------------------------------------------------------------------------------------


def read_config(folder: str | Path) -> dict[str, Any]:
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist: give model.checkpoint the path of a "
                              "Hugging Face model folder (config.json + *.safetensors), or set TRAINBENCH_DATA")
    path = folder / CONFIG
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing: a Hugging Face model folder has a config.json beside its "
                              "weights (save it with save_pretrained)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: expected a JSON object, found {type(raw).__name__}")
    return raw


def architecture(hf: dict[str, Any], path: Path) -> str:
    archs = hf.get("architectures") or []
    known = [ARCHITECTURES[a] for a in archs if a in ARCHITECTURES]
    if len(known) != 1:
        raise CheckpointError(f"{path}: architectures {archs} (model_type {hf.get('model_type')!r}) is not one this "
                              f"loader reads ({', '.join(ARCHITECTURES)}); convert the checkpoint or choose a "
                              "Llama-class one")
    return known[0]


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
    """config.json -> llama.Config's shape fields (seq_len is the training context: the spec's, not the file's)."""
    arch = architecture(hf, path)
    try:
        if hf.get("hidden_act", "silu") != "silu" or hf.get("mlp_bias"):
            raise ValueError(f"hidden_act {hf.get('hidden_act')!r}, mlp_bias {hf.get('mlp_bias')} (SwiGLU with silu "
                             "and no MLP bias is implemented)")
        theta, scaling = _rope(hf)
        n_head = int(hf["num_attention_heads"])
        fields: dict[str, Any] = {
            "n_layer": int(hf["num_hidden_layers"]), "d_model": int(hf["hidden_size"]), "n_head": n_head,
            "n_kv_head": int(hf.get("num_key_value_heads") or n_head),
            "head_dim": int(hf.get("head_dim") or hf["hidden_size"] // n_head),
            "ffn_dim": int(hf["intermediate_size"]), "vocab_size": int(hf["vocab_size"]), "rope_theta": theta,
            "rope_scaling": scaling, "norm_eps": float(hf.get("rms_norm_eps", 1e-5)),
            "attention_bias": bool(hf.get("attention_bias", False)), "qkv_bias": arch == "qwen2",
            "tie_embeddings": bool(hf.get("tie_word_embeddings", False))}
        if arch == "qwen2" and hf.get("use_sliding_window"):
            raise ValueError(f"use_sliding_window with sliding_window {hf.get('sliding_window')} (full causal "
                             "attention only)")
        if arch == "mixtral":
            if hf.get("sliding_window"):
                raise ValueError(f"sliding_window {hf['sliding_window']} (full causal attention only)")
            # transformers' router_aux_loss_coef weighs a loss k times this block's (tests/models/test_moe.py)
            fields["moe"] = {"experts": int(hf["num_local_experts"]), "top_k": int(hf["num_experts_per_tok"]),
                             "expert_ffn_dim": int(hf["intermediate_size"]), "score": "softmax",
                             "normalize_top_k": True,
                             "aux_loss_coeff": float(hf.get("router_aux_loss_coef", 0.0))
                             * int(hf["num_experts_per_tok"])}
    except KeyError as e:
        raise CheckpointError(f"{path}: field {e} is missing ({arch} config)") from None
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: {e}") from None
    return fields


_COMPARED = ("n_layer", "d_model", "n_head", "kv_heads", "head_size", "ffn_dim", "vocab_size", "rope_theta",
             "rope_scaling", "norm_eps", "attention_bias", "qkv_bias", "tie_embeddings", "moe")


def config_for(folder: str | Path, declared: llama.Config | None = None, seq_len: int | None = None) -> llama.Config:
    """The checkpoint's shape as a llama.Config. With `declared` (the spec's model block), every shape field it
    sets must agree with config.json: a mismatch names the field and both values."""
    folder = Path(folder).expanduser()
    fields = suite_fields(read_config(folder), folder / CONFIG)
    if declared is None:
        return llama.Config(**fields, seq_len=seq_len or 2048)
    ckpt = llama.Config(**fields, seq_len=declared.seq_len, init_std=declared.init_std)
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


# ---- the weight files ----------------------------------------------------------------------------------------


def weight_files(folder: Path) -> list[Path]:
    """model.safetensors, or every shard the index names (each must be there)."""
    if (folder / INDEX).is_file():
        try:
            weight_map = json.loads((folder / INDEX).read_text(encoding="utf-8"))["weight_map"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{folder / INDEX}: not a safetensors index with a weight_map ({e})") from None
        shards = sorted(set(weight_map.values()))
        missing = [s for s in shards if not (folder / s).is_file()]
        if missing:
            raise CheckpointError(f"{folder / INDEX} names shard(s) {', '.join(missing)} that are not in {folder} "
                                  "(a partial download or copy): copy the missing files, or the whole folder again")
        return [folder / s for s in shards]
    if (folder / SINGLE).is_file():
        return [folder / SINGLE]
    raise CheckpointError(f"{folder} has neither {SINGLE} nor {INDEX}: only safetensors checkpoints are read "
                          "(convert .bin / .pth with save_pretrained(safe_serialization=True))")


def read_tensors(folder: Path) -> Iterator[tuple[str, torch.Tensor, Path]]:
    from safetensors import SafetensorError, safe_open

    for path in weight_files(folder):
        try:
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                    yield name, f.get_tensor(name), path
        except (SafetensorError, OSError) as e:
            raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None


def hf_names(tensors: dict[str, tuple[torch.Tensor, Path]]) -> dict[str, tuple[torch.Tensor, Path]]:
    """Mixtral's on-disk per-expert tensors stacked into transformers 5's in-memory names
    (mlp.experts.gate_up_proj (E, 2*hidden, dim) = [w1; w3], mlp.experts.down_proj (E, dim, hidden), mlp.gate)."""
    out: dict[str, tuple[torch.Tensor, Path]] = {}
    experts: dict[int, dict[int, dict[str, torch.Tensor]]] = {}
    files: dict[int, Path] = {}
    for name, (t, path) in tensors.items():
        if m := _MIXTRAL_EXPERT.fullmatch(name):
            experts.setdefault(int(m[1]), {}).setdefault(int(m[2]), {})[m[3]] = t
            files[int(m[1])] = path
        elif m := _MIXTRAL_GATE.fullmatch(name):
            out[f"model.layers.{m[1]}.mlp.gate.weight"] = (t, path)
        else:
            out[name] = (t, path)
    for layer, per_expert in experts.items():
        n = max(per_expert) + 1
        missing = [f"model.layers.{layer}.block_sparse_moe.experts.{e}.{w}.weight" for e in range(n)
                   for w in ("w1", "w2", "w3") if w not in per_expert.get(e, {})]
        if missing:
            raise CheckpointError(f"tensor {missing[0]} is in no file of {files[layer].parent} ({len(missing)} "
                                  "expert tensors missing): the checkpoint is incomplete")
        gate_up = torch.stack([torch.cat([per_expert[e]["w1"], per_expert[e]["w3"]]) for e in range(n)])
        out[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = (gate_up, files[layer])
        down = torch.stack([per_expert[e]["w2"] for e in range(n)])
        out[f"model.layers.{layer}.mlp.experts.down_proj"] = (down, files[layer])
    return out


def split_fused_qkv(tensors: dict[str, tuple[torch.Tensor, Path]],
                    cfg: llama.Config) -> dict[str, tuple[torch.Tensor, Path]]:
    """`self_attn.qkv_proj` split into q_proj, k_proj, v_proj by the config's head counts."""
    out = {}
    sizes = [cfg.n_head * cfg.head_size, cfg.kv_heads * cfg.head_size, cfg.kv_heads * cfg.head_size]
    for name, (t, path) in tensors.items():
        m = _FUSED_QKV.fullmatch(name)
        if m is None:
            out[name] = (t, path)
            continue
        if t.shape[0] != sum(sizes):
            raise CheckpointError(f"{path}: tensor {name} has {t.shape[0]} rows, q + k + v of the model config.json "
                                  f"describes need {sum(sizes)} ({' + '.join(map(str, sizes))})")
        for proj, part in zip(("q_proj", "k_proj", "v_proj"), t.split(sizes), strict=True):
            out[f"model.layers.{m[1]}.self_attn.{proj}.{m[2]}"] = (part, path)
    return out


def check_dtype(dtype: torch.dtype, device: torch.device, where: str) -> None:
    """A tensor dtype this model can compute in, on this device; else the file and what to do."""
    if dtype not in DTYPES.values():
        raise CheckpointError(f"{where}: dtype {dtype} is not one this model computes in "
                              f"({', '.join(DTYPES)}): dequantize the checkpoint first")
    if dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise CheckpointError(f"{where}: bfloat16 weights, and {torch.cuda.get_device_name(device)} has no "
                              "bfloat16: set model.dtype: float32 (or float16) to cast them on load")
    if dtype == torch.float64 and device.type in ("mps", "npu"):
        raise CheckpointError(f"{where}: float64 weights, which {device.type} cannot hold: set model.dtype: float32")


# ---- load and save -------------------------------------------------------------------------------------------


def load_llama(folder: str | Path, cfg: llama.Config, dtype: torch.dtype | None = None,
               device: torch.device | str = "cpu", runs_on: torch.device | str | None = None) -> llama.Llama:
    """The model `cfg` describes (see config_for) holding the folder's weights, on `device`. dtype: cast on load
    (None: the checkpoint's own), checked against `runs_on` (the device the run computes on; default `device`).
    Built on the meta device and filled tensor by tensor: no random init of a large model."""
    folder, device = Path(folder).expanduser(), torch.device(device)
    target = torch.device(runs_on) if runs_on is not None else device
    if dtype is not None:
        check_dtype(dtype, target, f"model.dtype {dtype}")
    raw = {name: (t, path) for name, t, path in read_tensors(folder)}
    named = hf_names(split_fused_qkv(raw, cfg))
    with torch.device("meta"):
        model = llama.Llama(cfg, llama.vocab(cfg, {}))
    expected = model.state_dict()
    mapped: dict[str, tuple[str, torch.Tensor, Path]] = {}
    for hf_name, (t, path) in named.items():
        if hf_name.endswith("rotary_emb.inv_freq"):
            continue
        try:
            for suite_name, part in llama.from_hf_state_dict({hf_name: t}).items():
                mapped[suite_name] = (hf_name, part, path)
        except KeyError:
            raise CheckpointError(f"{path}: tensor {hf_name} has no place in the {cfg.n_layer}-layer model "
                                  "(llama.HF_TO_SUITE): a checkpoint of another architecture or layout") from None
    if cfg.tie_embeddings and "output.weight" not in mapped and "tok_embeddings.weight" in mapped:
        mapped["output.weight"] = mapped["tok_embeddings.weight"]
    for name, (hf_name, t, path) in mapped.items():
        if name not in expected:
            raise CheckpointError(f"{path}: tensor {hf_name} ({tuple(t.shape)}) has no place in the model "
                                  f"config.json describes ({name} does not exist): the files and config.json disagree")
        if tuple(t.shape) != tuple(expected[name].shape):
            raise CheckpointError(f"{path}: tensor {hf_name} has shape {tuple(t.shape)}, the model config.json "
                                  f"describes needs {tuple(expected[name].shape)} ({name})")
        if dtype is None:  # kept as stored: the run's device must compute in it
            check_dtype(t.dtype, target, f"{path}: tensor {hf_name}")
        elif t.dtype not in DTYPES.values():
            check_dtype(t.dtype, target, f"{path}: tensor {hf_name}")
    missing = [n for n in expected if n not in mapped]
    if missing:
        raise CheckpointError(f"tensor {_hf_name(missing[0], expected[missing[0]])} (shape {tuple(expected[missing[0]].shape)}) is in no "
                              f"file of {folder} ({len(missing)} missing): the checkpoint is incomplete")
    load_dtype = dtype or next(iter(mapped.values()))[1].dtype
    model = model.to_empty(device=device).to(load_dtype)
    model.load_state_dict({n: t for n, (_, t, _) in mapped.items()}, strict=True)
    model.rotary = Rotary(cfg.head_size, cfg.rope_theta, cfg.rope_scaling).to(device)  # fp32 tables, as HF's
    if cfg.tie_embeddings:
        model.output.weight = model.tok_embeddings.weight
    return model


def _hf_name(suite_name: str, like: torch.Tensor) -> str:
    return next(iter(to_hf_state_dict({suite_name: like})))


def _reverse_rules() -> list[tuple[re.Pattern[str], str]]:
    """llama.HF_TO_SUITE read backwards: each suite name template as a regex, each HF pattern as a template."""
    rules = []
    for hf_pattern, suite_template in llama.HF_TO_SUITE:
        groups = re.findall(r"\((.*?)\)", hf_pattern)
        regex = re.escape(suite_template.replace("w1+w3", "W13"))
        for i, g in enumerate(groups, 1):
            regex = regex.replace(re.escape(f"\\{i}"), f"({g})")
        template, i = hf_pattern, 0
        for g in groups:
            i += 1
            template = template.replace(f"({g})", f"\\{i}", 1)
        rules.append((re.compile(regex), template.replace("\\.", ".")))
    return rules


def to_hf_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The suite's names -> Hugging Face's on-disk ones (Mixtral's experts one by one, as its checkpoints are)."""
    rules, out = _reverse_rules(), {}
    for name, t in state.items():
        m = re.fullmatch(r"layers\.(\d+)\.moe\.experts\.(w[123])", name)
        if m:
            for e in range(t.shape[0]):
                out[f"model.layers.{m[1]}.block_sparse_moe.experts.{e}.{m[2]}.weight"] = t[e]
            continue
        if m := re.fullmatch(r"layers\.(\d+)\.moe\.router\.weight", name):
            out[f"model.layers.{m[1]}.block_sparse_moe.gate.weight"] = t
            continue
        for regex, template in rules:
            if regex.fullmatch(name):
                out[regex.sub(template, name)] = t
                break
        else:
            raise KeyError(f"suite parameter {name!r} has no Hugging Face name (llama.HF_TO_SUITE)")
    return out


def hf_config(cfg: llama.Config, dtype: torch.dtype) -> dict[str, Any]:
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling is not None:
        rope = {"rope_type": "llama3", "rope_theta": cfg.rope_theta, **cfg.rope_scaling.model_dump()}
    out: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layer, "num_attention_heads": cfg.n_head, "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_size, "intermediate_size": cfg.ffn_dim, "vocab_size": llama.vocab(cfg, {}),
        "max_position_embeddings": cfg.seq_len, "rms_norm_eps": cfg.norm_eps, "rope_parameters": rope,
        "rope_theta": cfg.rope_theta, "attention_bias": cfg.attention_bias, "mlp_bias": False,
        "hidden_act": "silu", "tie_word_embeddings": cfg.tie_embeddings, "attention_dropout": 0.0,
        "dtype": str(dtype).removeprefix("torch.")}
    if cfg.qkv_bias and not cfg.attention_bias:
        if cfg.moe is not None:
            raise ValueError("qkv_bias with moe has no Hugging Face layout here (Qwen2 is dense)")
        out.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False,
                   sliding_window=None, max_window_layers=cfg.n_layer)
        del out["attention_bias"]
    if cfg.moe is not None:
        moe = cfg.moe
        if moe.score != "softmax" or not moe.normalize_top_k or moe.shared_experts or cfg.dense_layers:
            raise ValueError("only Mixtral-form MoE (softmax, renormalised top-k, no shared experts, every layer "
                             "MoE) has a Hugging Face layout here")
        out.update(architectures=["MixtralForCausalLM"], model_type="mixtral", intermediate_size=moe.expert_ffn_dim,
                   num_local_experts=moe.experts, num_experts_per_tok=moe.top_k, sliding_window=None,
                   router_aux_loss_coef=moe.aux_loss_coeff / moe.top_k)
    return out


def save_llama(model: llama.Llama, folder: str | Path, max_shard_bytes: int | None = None) -> Path:
    """config.json + model.safetensors (or shards + model.safetensors.index.json past max_shard_bytes), as
    transformers' save_pretrained writes them; transformers' from_pretrained reads the folder."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v for k, v in model.state_dict().items()}
    if model.cfg.tie_embeddings:
        state.pop("output.weight", None)
    hf = {k: v.detach().contiguous().cpu() for k, v in to_hf_state_dict(state).items()}
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

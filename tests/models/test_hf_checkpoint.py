"""Hugging Face model folders into the suite's Llama-class decoder and back (suite/models/hf/checkpoint.py), against
transformers' own save_pretrained / from_pretrained on the same weights; and each bad folder refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support.hf_reference import hf_llama, hf_mixtral, randomize
from support.promised import require
from test_llama import _max_abs, _tokens

from suite.data.base import DataMissing
from suite.models.hf import checkpoint as ckpt
from suite.models.hf import tensors as hf_tensors
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama

torch.set_num_threads(1)


def _saved_by_transformers(cfg: llama_config.Config, folder: Path, mixtral: bool = False, **save: object) -> torch.nn.Module:
    hf_model = hf_mixtral(cfg) if mixtral else hf_llama(cfg)
    randomize(hf_model)
    hf_model.save_pretrained(folder, **save)
    return hf_model


def _noise(hf_model: torch.nn.Module, idx: torch.Tensor) -> float:
    """fp32 vs fp64 logits of the reference itself: the scale two correct fp32 computations differ by."""
    with torch.no_grad():
        return _max_abs(hf_model(idx).logits, hf_model.double()(idx).logits)


@pytest.mark.parametrize("mixtral,save", [(False, {}), (False, {"max_shard_size": "40KB"}), (True, {})])
def test_checkpoint_saved_by_transformers_gives_its_logits(tmp_path, mixtral, save):
    require("transformers")
    cfg = llama_config.Config(preset="gpt-oss-tiny", attention_bias=False) if mixtral else llama_config.Config(preset="llama3.1-tiny")
    hf_model = _saved_by_transformers(cfg, tmp_path, mixtral, **save)
    if save:
        assert (tmp_path / hf_tensors.INDEX).is_file() and len(hf_tensors.weight_files(tmp_path)) > 3
    loaded_cfg = ckpt.config_for(tmp_path, cfg)
    ours = ckpt.load_llama(tmp_path, loaded_cfg).eval()
    idx = _tokens(cfg)
    with torch.no_grad():
        gap = _max_abs(ours(idx), hf_model(idx).logits)
    noise = _noise(hf_model, idx)
    assert 0 < noise and gap <= 4 * noise, f"logits differ by {gap:.3g}, fp32 noise {noise:.3g}"


def test_bf16_checkpoint_loads_in_bf16_or_cast_to_fp32(tmp_path):
    require("transformers")
    cfg = llama_config.Config(preset="llama3.1-tiny")
    _saved_by_transformers(cfg, tmp_path).to(torch.bfloat16).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "bfloat16"
    native = ckpt.load_llama(tmp_path, cfg)
    assert {p.dtype for p in native.parameters()} == {torch.bfloat16}
    assert native.rotary.inv_freq.dtype == torch.float32  # rope tables stay fp32, as Meta's and HF's
    cast = ckpt.load_llama(tmp_path, cfg, dtype=torch.float32).eval()
    assert {p.dtype for p in cast.parameters()} == {torch.float32}
    from transformers import AutoModelForCausalLM

    # transformers' own reading of the folder in fp32 (a .float() of the bf16 model would keep its rope table
    # rounded to bf16, a buffer cast with the weights)
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, attn_implementation="eager").eval()
    idx = _tokens(cfg)
    with torch.no_grad():
        gap = _max_abs(cast(idx), theirs(idx).logits)  # the same bf16-rounded weights, both in fp32
    assert gap <= 4 * _noise(theirs, idx)


@pytest.mark.parametrize("preset,overrides,shard", [
    ("llama3.1-tiny", {}, 30_000),  # sharded, with an index
    ("llama3.1-tiny", {"attention_bias": True, "tie_embeddings": True, "rope_scaling": None}, None),
    ("gpt-oss-tiny", {"attention_bias": False}, None),  # Mixtral layout: experts one by one on disk
])
def test_suite_model_saved_back_reads_in_transformers_with_same_logits(tmp_path, preset, overrides, shard):
    require("transformers")
    from transformers import AutoModelForCausalLM

    cfg = llama_config.Config(preset=preset, **overrides)
    ours = llama.build(cfg, {}).eval()
    randomize(ours, seed=3)
    ckpt.save_llama(ours, tmp_path, max_shard_bytes=shard)
    assert (tmp_path / hf_tensors.INDEX).is_file() == bool(shard)
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager",
                                                  experts_implementation="eager").eval()  # eager: has fp64
    idx = _tokens(cfg)
    with torch.no_grad():
        gap = _max_abs(ours(idx), theirs(idx).logits)
    noise = _noise(theirs, idx)
    assert gap <= 4 * noise, f"logits differ by {gap:.3g}, fp32 noise {noise:.3g}"
    back = ckpt.load_llama(tmp_path, ckpt.config_for(tmp_path, cfg))  # and our own reader reads it bit for bit
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), back.state_dict().values(), strict=True))


# ---- bad folders: each a DataMissing (exit 2, nothing recorded) naming the file and what to do ---------------


@pytest.fixture
def saved(tmp_path) -> tuple[Path, llama_config.Config]:
    cfg = llama_config.Config(preset="llama3.1-tiny")
    ckpt.save_llama(llama.build(cfg, {}), tmp_path, max_shard_bytes=30_000)
    return tmp_path, cfg


def _refused(folder: Path, cfg: llama_config.Config, *parts: str, **kw: object) -> None:
    with pytest.raises(DataMissing) as e:
        ckpt.load_llama(folder, ckpt.config_for(folder, cfg), **kw)
    for part in parts:
        assert part in str(e.value), str(e.value)


def test_missing_folder_and_missing_config(tmp_path, saved):
    folder, cfg = saved
    _refused(tmp_path / "nope", cfg, "nope does not exist", "model.checkpoint")
    (folder / "config.json").unlink()
    _refused(folder, cfg, "config.json is missing")


def test_index_naming_a_missing_shard(saved):
    folder, cfg = saved
    shard = hf_tensors.weight_files(folder)[1]
    shard.unlink()
    _refused(folder, cfg, f"model.safetensors.index.json names shard(s) {shard.name}",
             "partial")


def test_another_architecture(saved):
    folder, cfg = saved
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, "architectures": ["GPT2LMHeadModel"],
                                                    "model_type": "gpt2"}))
    _refused(folder, cfg, "config.json", "GPT2LMHeadModel", "LlamaForCausalLM")


def test_spec_shape_other_than_the_checkpoints(saved):
    folder, _ = saved
    with pytest.raises(DataMissing, match=r"config.json: ffn_dim is 160 in the checkpoint but 128 in the spec"):
        ckpt.config_for(folder, llama_config.Config(preset="llama3.1-tiny", ffn_dim=128))


def test_missing_and_misshapen_tensors_name_tensor_shape_and_file(saved):
    from safetensors.torch import load_file, save_file

    folder, cfg = saved
    shard = hf_tensors.weight_files(folder)[0]
    tensors = load_file(shard)
    name = sorted(tensors)[0]
    save_file({k: v for k, v in tensors.items() if k != name}, str(shard))
    _refused(folder, cfg, f"tensor {name}", "is in no file of", str(folder), "incomplete")
    save_file({**tensors, name: torch.zeros(3, 5)}, str(shard))
    _refused(folder, cfg, str(shard), f"tensor {name} has shape (3, 5)", str(tuple(tensors[name].shape)))


def test_dtype_the_device_cannot_hold(saved, monkeypatch):
    from safetensors.torch import load_file, save_file

    folder, cfg = saved
    shard = hf_tensors.weight_files(folder)[0]
    tensors = load_file(shard)
    save_file({k: v.to(torch.float8_e4m3fn) for k, v in tensors.items()}, str(shard))
    _refused(folder, cfg, str(shard), "float8_e4m3fn", "dequantize")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "Tesla V100")
    with pytest.raises(DataMissing, match="Tesla V100 has no bfloat16: set model.dtype: float32"):
        hf_tensors.check_dtype(torch.bfloat16, torch.device("cuda"), str(shard))


def test_fused_qkv_checkpoint_of_the_mlperf_reference_loads_split(tmp_path):
    """MLPerf's "Llama2-70b-fused-qkv-mlperf" keeps self_attn.qkv_proj = [q; k; v]: the same weights as separate
    q/k/v projections; a row count other than q + k + v is refused naming the tensor."""
    from safetensors.torch import load_file, save_file

    cfg = llama_config.Config(preset="llama3.1-tiny")
    ours = llama.build(cfg, {})
    ckpt.save_llama(ours, tmp_path)
    tensors = load_file(tmp_path / hf_tensors.SINGLE)
    for i in range(cfg.n_layer):
        p = f"model.layers.{i}.self_attn."
        tensors[p + "qkv_proj.weight"] = torch.cat([tensors.pop(p + f"{x}_proj.weight") for x in "qkv"])
    save_file(tensors, str(tmp_path / hf_tensors.SINGLE))
    back = ckpt.load_llama(tmp_path, cfg)
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), back.state_dict().values(), strict=True))
    tensors["model.layers.0.self_attn.qkv_proj.weight"] = tensors["model.layers.0.self_attn.qkv_proj.weight"][:-16]
    save_file(tensors, str(tmp_path / hf_tensors.SINGLE))
    with pytest.raises(DataMissing, match=r"qkv_proj.weight has 112 rows, q \+ k \+ v .* need 128 \(64 \+ 32 \+ 32\)"):
        ckpt.load_llama(tmp_path, cfg)


def test_bf16_checkpoint_for_a_device_without_bf16_is_refused_unless_cast(tmp_path, monkeypatch):
    """The check is against the device the run computes on (the weights load on the host first)."""
    from support.datafiles import write_fused_qkv_llama

    folder = write_fused_qkv_llama(tmp_path)
    cfg = ckpt.config_for(folder)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "Tesla V100")
    with pytest.raises(DataMissing, match=r"model.safetensors: tensor \S+: bfloat16 weights, and Tesla V100 has no "
                                          r"bfloat16: set model.dtype"):
        ckpt.load_llama(folder, cfg, runs_on="cuda")
    model = ckpt.load_llama(folder, cfg, dtype=torch.float32, runs_on="cuda")  # cast on load: allowed
    assert {p.dtype for p in model.parameters()} == {torch.float32}

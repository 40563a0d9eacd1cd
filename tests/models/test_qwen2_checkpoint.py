"""Qwen2ForCausalLM folders (Llama layers with q/k/v biases and no o bias, tied embeddings as the small Qwen2.5)
into the suite's decoder (`qkv_bias`), against transformers' own Qwen2 on the same weights, and back."""

from __future__ import annotations

import json

import torch
from support.hf_reference import _common, randomize
from support.promised import require
from test_llama import _max_abs, _tokens

from suite.models.hf import checkpoint as ckpt
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama

torch.set_num_threads(1)


def _qwen2_cfg(**over: object) -> llama_config.Config:
    return llama_config.Config(**{"n_layer": 2, "d_model": 64, "n_head": 4, "n_kv_head": 2, "ffn_dim": 96, "seq_len": 16,
                           "vocab_size": 80, "rope_theta": 1e6, "norm_eps": 1e-6, "qkv_bias": True,
                           "tie_embeddings": True, **over})


def _hf_qwen2(cfg: llama_config.Config):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hf_cfg = Qwen2Config(**_common(cfg), intermediate_size=cfg.ffn_dim, hidden_act="silu", use_sliding_window=False)
    hf_cfg._attn_implementation = "eager"
    return Qwen2ForCausalLM(hf_cfg).eval()


def _noise(hf_model, idx) -> float:
    with torch.no_grad():
        return _max_abs(hf_model(idx).logits, hf_model.double()(idx).logits)


def test_qwen2_saved_by_transformers_gives_its_logits(tmp_path):
    require("transformers")
    cfg = _qwen2_cfg()
    hf_model = _hf_qwen2(cfg)
    randomize(hf_model)
    hf_model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    assert any(n.endswith("q_proj.bias") for n, _ in hf_model.named_parameters())
    assert not any(n.endswith("o_proj.bias") for n, _ in hf_model.named_parameters())
    loaded = ckpt.config_for(tmp_path, cfg)
    assert loaded.qkv_bias and not loaded.attention_bias and loaded.tie_embeddings
    ours = ckpt.load_llama(tmp_path, loaded).eval()
    assert ours.layers[0].attention.wo.bias is None and ours.layers[0].attention.wq.bias is not None
    assert llama.param_count(cfg, {}) == sum(p.numel() for p in ours.parameters())
    idx = _tokens(cfg)
    with torch.no_grad():
        gap = _max_abs(ours(idx), hf_model(idx).logits)
    noise = _noise(hf_model, idx)
    assert 0 < noise and gap <= 4 * noise, f"logits differ by {gap:.3g}, fp32 noise {noise:.3g}"


def test_suite_qwen2_saved_back_reads_in_transformers(tmp_path):
    require("transformers")
    from transformers import AutoModelForCausalLM

    cfg = _qwen2_cfg()
    ours = llama.build(cfg, {}).eval()
    randomize(ours, seed=3)
    ckpt.save_llama(ours, tmp_path)
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert type(theirs).__name__ == "Qwen2ForCausalLM"
    idx = _tokens(cfg)
    with torch.no_grad():
        gap = _max_abs(ours(idx), theirs(idx).logits)
    assert gap <= 4 * _noise(theirs, idx), gap
    back = ckpt.load_llama(tmp_path, ckpt.config_for(tmp_path, cfg))
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), back.state_dict().values(), strict=True))


def test_qwen2_declared_without_qkv_bias_or_with_sliding_window_is_refused(tmp_path):
    import pytest

    from suite.data.base import DataMissing

    ckpt.save_llama(llama.build(_qwen2_cfg(), {}), tmp_path)
    with pytest.raises(DataMissing, match="qkv_bias is True in the checkpoint but False"):
        ckpt.config_for(tmp_path, _qwen2_cfg(qkv_bias=False))
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "use_sliding_window": True, "sliding_window": 8}))
    with pytest.raises(DataMissing, match="use_sliding_window"):
        ckpt.config_for(tmp_path, _qwen2_cfg())

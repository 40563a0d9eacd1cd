"""Hugging Face transformers models built from a suite `llama.Config`, with the same weights: the reference the
parity tests compare against (tests/models/test_llama.py, tests/models/test_moe.py)."""

from __future__ import annotations

from typing import Any

import torch

from suite.models.llama import config as llama_config
from suite.models.llama import model as llama


def _common(cfg: llama_config.Config) -> dict[str, Any]:
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling is not None:
        rope = {"rope_type": "llama3", "rope_theta": cfg.rope_theta, **cfg.rope_scaling.model_dump()}
    return dict(vocab_size=llama.vocab(cfg, {}), hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layer,
                num_attention_heads=cfg.n_head, num_key_value_heads=cfg.kv_heads, head_dim=cfg.head_size,
                max_position_embeddings=max(cfg.seq_len, 128), rms_norm_eps=cfg.norm_eps, rope_parameters=rope,
                tie_word_embeddings=cfg.tie_embeddings, attention_dropout=0.0)


def hf_llama(cfg: llama_config.Config) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_cfg = LlamaConfig(**_common(cfg), intermediate_size=cfg.ffn_dim, attention_bias=cfg.attention_bias,
                         mlp_bias=False, hidden_act="silu")
    hf_cfg._attn_implementation = "eager"  # explicit matmul + softmax: a different code path from ours (SDPA)
    return LlamaForCausalLM(hf_cfg).eval()


def hf_mixtral(cfg: llama_config.Config) -> Any:
    """Mixtral: Llama attention + softmax top-k MoE renormalised over the k; no shared experts, no biases."""
    from transformers import MixtralConfig, MixtralForCausalLM

    moe = cfg.moe
    assert moe is not None and moe.score == "softmax" and moe.normalize_top_k and not moe.shared_experts
    assert not cfg.attention_bias and not cfg.dense_layers
    hf_cfg = MixtralConfig(**_common(cfg), intermediate_size=moe.expert_ffn_dim, num_local_experts=moe.experts,
                           num_experts_per_tok=moe.top_k, sliding_window=None, router_jitter_noise=0.0,
                           output_router_logits=True, router_aux_loss_coef=moe.aux_loss_coeff)
    hf_cfg._attn_implementation = "eager"
    hf_cfg._experts_implementation = "eager"  # its per-expert loop (grouped_mm has no fp64, needed for the noise)
    return MixtralForCausalLM(hf_cfg).eval()


def randomize(model: torch.nn.Module, seed: int = 0) -> None:
    """Every parameter (and DeepSeek's score bias) drawn at a scale where each layer matters, norms around 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if name.endswith("inv_freq"):
                continue
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def load_into_suite(hf_model: torch.nn.Module, cfg: llama_config.Config) -> llama.Llama:
    """A suite model holding the Hugging Face model's weights, through the module's own name map (strict)."""
    hf_state = {k: v for k, v in hf_model.state_dict().items()}
    model = llama.Llama(cfg, llama.vocab(cfg, {}))
    model.load_state_dict(llama.from_hf_state_dict(hf_state), strict=True)
    return model.eval()

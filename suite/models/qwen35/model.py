"""Qwen3.5-397B-A17B's shape (the policy of MLPerf Training 6.1's qwen35_397b_grpo) and its parameter counts.

The shape is the reference's model table (mlcommons/training llm_moe_grpo/README.md, "Model details"): 60 layers in
15 blocks of 3 Gated DeltaNet + MoE layers then 1 gated-attention + MoE layer, width 4096, DeltaNet 64 V / 16 QK
heads of 128, gated attention 32 Q / 2 KV heads of 256, 512 routed experts (10 active) of width 1024 plus one
shared expert, vocabulary 248,320, untied embeddings. The counts are computed here from that shape (checked
against transformers' Qwen3_5MoeForCausalLM built on the meta device, tests/workloads/test_qwen35_397b_grpo.py,
and against suite/models/qwen35/decoder.py's modules, tests/models/test_qwen35_transformers.py). The generic MoE
decoder's preset (`preset: qwen3.5-397b-a17b`) runs plain GQA attention (the gated-attention layers' shape, no
gate) in every layer: its own count differs by the DeltaNet layers' projections (said beside the preset).
"""

from __future__ import annotations

from typing import Any

QWEN35_397B: dict[str, Any] = {
    "vocab_size": 248320, "hidden_size": 4096, "num_hidden_layers": 60, "full_attention_interval": 4,
    "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256,
    "linear_num_value_heads": 64, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 1024,
    "shared_expert_intermediate_size": 1024, "tie_word_embeddings": False,
}


def _full_attention(c: dict[str, Any]) -> int:
    d, h, kv, hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    # q_proj carries the query and its output gate (2 x H x hd); q/k RMSNorms over the head dimension
    return d * 2 * h * hd + 2 * d * kv * hd + h * hd * d + 2 * hd


def _linear_attention(c: dict[str, Any]) -> int:
    d = c["hidden_size"]
    hk, hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
    key, value = hk * dk, hv * dv
    conv = 2 * key + value                       # q, k, v go through the short causal convolution
    return (d * conv + d * value + 2 * d * hv    # in_proj_qkv, in_proj_z (output gate), in_proj_b and in_proj_a
            + conv * c["linear_conv_kernel_dim"] + 2 * hv + dv  # conv1d (depthwise), dt_bias + A_log, gated norm
            + value * d)                         # out_proj


def _moe(c: dict[str, Any], experts: int) -> int:
    d, e, s = c["hidden_size"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    router, shared_gate = c["num_experts"] * d, d
    return router + experts * 3 * d * e + 3 * d * s + shared_gate


def layer_types(c: dict[str, Any]) -> list[str]:
    k = c["full_attention_interval"]
    return ["full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(c["num_hidden_layers"])]


def _count(c: dict[str, Any], experts: int) -> int:
    d, v = c["hidden_size"], c["vocab_size"]
    n = v * d * (1 if c["tie_word_embeddings"] else 2) + d  # embeddings, lm_head, final norm
    for kind in layer_types(c):
        mixer = _full_attention(c) if kind == "full_attention" else _linear_attention(c)
        n += mixer + _moe(c, experts) + 2 * d
    return n


def param_count(c: dict[str, Any] = QWEN35_397B) -> int:
    """Every parameter (all 512 experts); no multi-token-prediction head (the reference trains none)."""
    return _count(c, c["num_experts"])


def active_param_count(c: dict[str, Any] = QWEN35_397B) -> int:
    """The parameters one token passes through, as the model card's 'A17B' counts them: every parameter but
    the routed experts it is not sent to (embedding and head included)."""
    return _count(c, c["num_experts_per_tok"])

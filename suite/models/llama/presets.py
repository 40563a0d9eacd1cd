"""Named shapes for `model: {arch: llama, preset: NAME}`; fields given beside the preset override it.

Sources (config.json of each published checkpoint, read through transformers 5.10's config classes and the
model cards): Llama 3.1 8B / 70B / 405B (meta-llama/Llama-3.1-*), gpt-oss-20b (openai/gpt-oss-20b), DeepSeek-V3
(deepseek-ai/DeepSeek-V3). What the suite's decoder leaves out of each is said beside it. The `*-tiny` presets keep
each family's structure (GQA ratio, MoE routing, shared experts, dense-then-MoE layers) at CPU size; their
`rope_scaling.original_max_position_embeddings` is small so that Llama 3.1's scaling really changes frequencies
at a 16-32 token context.
"""

from __future__ import annotations

from typing import Any

_LLAMA31_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                 "original_max_position_embeddings": 8192}
_LLAMA31 = {"vocab_size": 128256, "seq_len": 8192, "rope_theta": 500000.0, "rope_scaling": _LLAMA31_ROPE,
            "norm_eps": 1e-5, "tie_embeddings": False}

PRESETS: dict[str, dict[str, Any]] = {
    "llama3.1-8b": {**_LLAMA31, "n_layer": 32, "d_model": 4096, "n_head": 32, "n_kv_head": 8, "ffn_dim": 14336},
    "llama3.1-70b": {**_LLAMA31, "n_layer": 80, "d_model": 8192, "n_head": 64, "n_kv_head": 8, "ffn_dim": 28672},
    "llama3.1-405b": {**_LLAMA31, "n_layer": 126, "d_model": 16384, "n_head": 128, "n_kv_head": 8,
                      "ffn_dim": 53248},
    # Llama 2 70B (meta-llama/Llama-2-70b-hf config.json): the base of MLPerf's llama2_70b_lora; 4096 context
    "llama2-70b": {"vocab_size": 32000, "seq_len": 4096, "n_layer": 80, "d_model": 8192, "n_head": 64,
                   "n_kv_head": 8, "ffn_dim": 28672, "rope_theta": 10000.0, "norm_eps": 1e-5,
                   "tie_embeddings": False},
    # gpt-oss-20b: 24 layers, 32 experts, top-4 (softmax over the chosen logits = renormalised softmax), head_dim
    # 64 with 64 query heads (4096 wide, not d_model), 8 KV heads, biased attention projections. Left out: attention
    # sinks, the 128-token sliding window on alternate layers, YaRN rope scaling (plain rope, theta 150000), the
    # clamped SwiGLU (alpha 1.702, limit 7) and expert / router biases. Aux coefficient: transformers'
    # GptOssConfig.router_aux_loss_coef 0.001 in its form, which is top_k x this block's (moe.load_balancing_loss),
    # so 0.004 here; the MLPerf 6.1 ruleset (closed_gpt_oss_20b.yaml) does not fix one.
    "gpt-oss-20b": {"vocab_size": 201088, "seq_len": 8192, "n_layer": 24, "d_model": 2880, "n_head": 64,
                    "n_kv_head": 8, "head_dim": 64, "ffn_dim": 2880, "attention_bias": True,
                    "rope_theta": 150000.0, "norm_eps": 1e-5, "tie_embeddings": False,
                    "moe": {"experts": 32, "top_k": 4, "expert_ffn_dim": 2880, "score": "softmax",
                            "aux_loss_coeff": 0.004}},
    # DeepSeek-V3 (671B total, 37B active): 61 layers, the first 3 dense (ffn 18432), then 256 routed experts
    # (top-8 of them, sigmoid scores, choice bias, 8 groups of which 4 are used, weights x 2.5) and 1 shared
    # expert of width 2048. Left out: Multi-head Latent Attention (replaced by plain multi-head attention with 128
    # heads of 128, so attention parameters and FLOPs differ from the real model's), multi-token prediction,
    # YaRN scaling and the bias's update rule. moe_aux_loss_coeff 0.01: MLPerf's closed_deepseekv3_671b.yaml.
    "deepseek-v3": {"vocab_size": 129280, "seq_len": 4096, "n_layer": 61, "d_model": 7168, "n_head": 128,
                    "n_kv_head": 128, "head_dim": 128, "ffn_dim": 18432, "dense_layers": 3,
                    "rope_theta": 10000.0, "norm_eps": 1e-6, "tie_embeddings": False,
                    "moe": {"experts": 256, "top_k": 8, "expert_ffn_dim": 2048, "score": "sigmoid",
                            "routed_scaling": 2.5, "score_bias": True, "groups": 8, "topk_groups": 4,
                            "shared_experts": 1, "aux_loss_coeff": 0.01}},
    # Qwen3.5-397B-A17B (MLPerf qwen35_397b_grpo's policy; mlcommons/training llm_moe_grpo/README.md "Model
    # details"): 60 layers, width 4096, 512 routed experts (top-10, softmax renormalised) of width 1024 plus 1
    # shared expert, vocabulary 248,320, untied. Left out: the Gated DeltaNet mixers of 45 of the 60 layers (here
    # every layer is the gated-attention layers' GQA shape, 32 Q / 2 KV heads of 256, without the output gate),
    # rotary on 64 of the 256 head dimensions (here all), the shared expert's sigmoid gate and the MTP head. The real
    # architecture's counts (396.3B total, 17.3B active, as transformers' Qwen3_5MoeForCausalLM) are
    # suite/models/qwen35/model.py's. Aux coefficient 0.001: transformers' Qwen3_5MoeTextConfig.router_aux_loss_coef (the
    # reference freezes the router: freeze_moe_router).
    "qwen3.5-397b-a17b": {"vocab_size": 248320, "seq_len": 65536, "n_layer": 60, "d_model": 4096, "n_head": 32,
                          "n_kv_head": 2, "head_dim": 256, "ffn_dim": 1024, "rope_theta": 10000.0,
                          "norm_eps": 1e-6, "tie_embeddings": False,
                          "moe": {"experts": 512, "top_k": 10, "expert_ffn_dim": 1024, "score": "softmax",
                                  "shared_experts": 1, "aux_loss_coeff": 0.001}},
    # CPU sizes of the same families
    "llama3.1-tiny": {"vocab_size": 256, "seq_len": 32, "n_layer": 2, "d_model": 64, "n_head": 4, "n_kv_head": 2,
                      "ffn_dim": 160, "rope_theta": 500000.0, "norm_eps": 1e-5, "tie_embeddings": False,
                      "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 64}},
    "gpt-oss-tiny": {"vocab_size": 256, "seq_len": 32, "n_layer": 2, "d_model": 48, "n_head": 4, "n_kv_head": 2,
                     "head_dim": 16, "ffn_dim": 48, "attention_bias": True, "rope_theta": 150000.0,
                     "norm_eps": 1e-5, "tie_embeddings": False,
                     "moe": {"experts": 8, "top_k": 2, "expert_ffn_dim": 48, "score": "softmax",
                             "aux_loss_coeff": 0.004}},
    "deepseek-v3-tiny": {"vocab_size": 256, "seq_len": 32, "n_layer": 3, "d_model": 64, "n_head": 4, "n_kv_head": 4,
                         "head_dim": 16, "ffn_dim": 128, "dense_layers": 1, "rope_theta": 10000.0,
                         "norm_eps": 1e-6, "tie_embeddings": False,
                         "moe": {"experts": 16, "top_k": 4, "expert_ffn_dim": 32, "score": "sigmoid",
                                 "routed_scaling": 2.5, "score_bias": True, "groups": 4, "topk_groups": 2,
                                 "shared_experts": 1, "aux_loss_coeff": 0.01}},
    "qwen3.5-moe-tiny": {"vocab_size": 256, "seq_len": 32, "n_layer": 2, "d_model": 64, "n_head": 4, "n_kv_head": 1,
                         "head_dim": 32, "ffn_dim": 32, "rope_theta": 10000.0, "norm_eps": 1e-6,
                         "tie_embeddings": False,
                         "moe": {"experts": 16, "top_k": 4, "expert_ffn_dim": 32, "score": "softmax",
                                 "shared_experts": 1, "aux_loss_coeff": 0.001}},
}

# each full-size preset's CPU counterpart (the tests' FLOPs and parity shapes; a spec's `tiny` variant)
TINY: dict[str, str] = {"llama3.1-8b": "llama3.1-tiny", "llama3.1-70b": "llama3.1-tiny",
                        "llama3.1-405b": "llama3.1-tiny", "gpt-oss-20b": "gpt-oss-tiny",
                        "deepseek-v3": "deepseek-v3-tiny", "qwen3.5-397b-a17b": "qwen3.5-moe-tiny",
                        "llama2-70b": "llama3.1-tiny"}  # dense GQA as Llama 2 70B (its rope has no 3.1 scaling)


def expand(data: Any) -> Any:
    """A Config's raw fields with its `preset` filled in underneath them (given fields win; `moe` and
    `rope_scaling` merge field by field)."""
    if not isinstance(data, dict) or data.get("preset") is None:
        return data
    name = data["preset"]
    if name not in PRESETS:
        raise ValueError(f"preset {name!r} is unknown; known: {', '.join(PRESETS)}")
    merged = {**PRESETS[name], **data}
    for nested in ("moe", "rope_scaling"):
        base, given = PRESETS[name].get(nested), data.get(nested)
        if isinstance(base, dict) and isinstance(given, dict):
            merged[nested] = {**base, **given}
    return merged

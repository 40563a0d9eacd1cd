"""DeepSeek-V3 (deepseek-ai/DeepSeek-V3 config.json, read through transformers 5.10's DeepseekV3Config): a preset
of the suite's MoE decoder; its checkpoints are not read (Multi-head Latent Attention): no `architectures`.

671B total, 37B active: 61 layers, the first 3 dense (ffn 18432), then 256 routed experts (top-8 of them, sigmoid
scores, choice bias, 8 groups of which 4 are used, weights x 2.5) and 1 shared expert of width 2048. Left out:
Multi-head Latent Attention (replaced by plain multi-head attention with 128 heads of 128, so attention parameters
and FLOPs differ from the real model's), multi-token prediction, YaRN scaling and the bias's update rule.
moe_aux_loss_coeff 0.01: MLPerf's closed_deepseekv3_671b.yaml. `deepseek-v3-tiny` keeps the structure (dense-then-
MoE layers, group-limited sigmoid routing, a shared expert) at CPU size.

May import what `suite.models` may.
"""

from __future__ import annotations

from suite.models.family import Family

FAMILY = Family(
    name="deepseek_v3",
    presets={
        "deepseek-v3": {"vocab_size": 129280, "seq_len": 4096, "n_layer": 61, "d_model": 7168, "n_head": 128,
                        "n_kv_head": 128, "head_dim": 128, "ffn_dim": 18432, "dense_layers": 3,
                        "rope_theta": 10000.0, "norm_eps": 1e-6, "tie_embeddings": False,
                        "moe": {"experts": 256, "top_k": 8, "expert_ffn_dim": 2048, "score": "sigmoid",
                                "routed_scaling": 2.5, "score_bias": True, "groups": 8, "topk_groups": 4,
                                "shared_experts": 1, "aux_loss_coeff": 0.01}},
        "deepseek-v3-tiny": {"vocab_size": 256, "seq_len": 32, "n_layer": 3, "d_model": 64, "n_head": 4,
                             "n_kv_head": 4, "head_dim": 16, "ffn_dim": 128, "dense_layers": 1,
                             "rope_theta": 10000.0, "norm_eps": 1e-6, "tie_embeddings": False,
                             "moe": {"experts": 16, "top_k": 4, "expert_ffn_dim": 32, "score": "sigmoid",
                                     "routed_scaling": 2.5, "score_bias": True, "groups": 4, "topk_groups": 2,
                                     "shared_experts": 1, "aux_loss_coeff": 0.01}},
    },
    tiny={"deepseek-v3": "deepseek-v3-tiny"},
)

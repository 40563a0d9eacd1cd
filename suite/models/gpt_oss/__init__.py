"""gpt-oss (openai/gpt-oss-20b config.json, read through transformers 5.10's GptOssConfig and the model card): a
preset of the suite's MoE decoder. Its Hugging Face checkpoints are not read (see suite/models/llama/model.py's
HF_TO_SUITE note): no `architectures`.

gpt-oss-20b: 24 layers, 32 experts, top-4 (softmax over the chosen logits = renormalised softmax), head_dim 64 with
64 query heads (4096 wide, not d_model), 8 KV heads, biased attention projections. Left out: attention sinks, the
128-token sliding window on alternate layers, YaRN rope scaling (plain rope, theta 150000), the clamped SwiGLU
(alpha 1.702, limit 7) and expert / router biases. Aux coefficient: transformers' GptOssConfig.router_aux_loss_coef
0.001 in its form, which is top_k x this block's (moe.load_balancing_loss), so 0.004 here; the MLPerf 6.1 ruleset
(closed_gpt_oss_20b.yaml) does not fix one. `gpt-oss-tiny` keeps the structure at CPU size.

May import what `suite.models` may.
"""

from __future__ import annotations

from suite.models.family import Family

FAMILY = Family(
    name="gpt_oss",
    presets={
        "gpt-oss-20b": {"vocab_size": 201088, "seq_len": 8192, "n_layer": 24, "d_model": 2880, "n_head": 64,
                        "n_kv_head": 8, "head_dim": 64, "ffn_dim": 2880, "attention_bias": True,
                        "rope_theta": 150000.0, "norm_eps": 1e-5, "tie_embeddings": False,
                        "moe": {"experts": 32, "top_k": 4, "expert_ffn_dim": 2880, "score": "softmax",
                                "aux_loss_coeff": 0.004}},
        "gpt-oss-tiny": {"vocab_size": 256, "seq_len": 32, "n_layer": 2, "d_model": 48, "n_head": 4, "n_kv_head": 2,
                         "head_dim": 16, "ffn_dim": 48, "attention_bias": True, "rope_theta": 150000.0,
                         "norm_eps": 1e-5, "tie_embeddings": False,
                         "moe": {"experts": 8, "top_k": 2, "expert_ffn_dim": 48, "score": "softmax",
                                 "aux_loss_coeff": 0.004}},
    },
    tiny={"gpt-oss-20b": "gpt-oss-tiny"},
)

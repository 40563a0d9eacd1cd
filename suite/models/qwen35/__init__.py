"""Qwen3.5-397B-A17B (MLPerf qwen35_397b_grpo's policy; mlcommons/training llm_moe_grpo/README.md "Model details"):
a preset of the suite's MoE decoder; its checkpoints are not read: no `architectures`.

60 layers, width 4096, 512 routed experts (top-10, softmax renormalised) of width 1024 plus 1 shared expert,
vocabulary 248,320, untied. Left out: the Gated DeltaNet mixers of 45 of the 60 layers (here every layer is the
gated-attention layers' GQA shape, 32 Q / 2 KV heads of 256, without the output gate), rotary on 64 of the 256 head
dimensions (here all), the shared expert's sigmoid gate and the MTP head. The real architecture's counts (396.3B
total, 17.3B active, as transformers' Qwen3_5MoeForCausalLM) are suite/models/qwen35/model.py's. Aux coefficient
0.001: transformers' Qwen3_5MoeTextConfig.router_aux_loss_coef (the reference freezes the router:
freeze_moe_router).

May import what `suite.models` may.
"""

from __future__ import annotations

from suite.models.family import Family

FAMILY = Family(
    name="qwen35",
    presets={
        "qwen3.5-397b-a17b": {"vocab_size": 248320, "seq_len": 65536, "n_layer": 60, "d_model": 4096, "n_head": 32,
                              "n_kv_head": 2, "head_dim": 256, "ffn_dim": 1024, "rope_theta": 10000.0,
                              "norm_eps": 1e-6, "tie_embeddings": False,
                              "moe": {"experts": 512, "top_k": 10, "expert_ffn_dim": 1024, "score": "softmax",
                                      "shared_experts": 1, "aux_loss_coeff": 0.001}},
        "qwen3.5-moe-tiny": {"vocab_size": 256, "seq_len": 32, "n_layer": 2, "d_model": 64, "n_head": 4,
                             "n_kv_head": 1, "head_dim": 32, "ffn_dim": 32, "rope_theta": 10000.0, "norm_eps": 1e-6,
                             "tie_embeddings": False,
                             "moe": {"experts": 16, "top_k": 4, "expert_ffn_dim": 32, "score": "softmax",
                                     "shared_experts": 1, "aux_loss_coeff": 0.001}},
    },
    tiny={"qwen3.5-397b-a17b": "qwen3.5-moe-tiny"},
)

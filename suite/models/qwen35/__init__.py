"""Qwen3.5-397B-A17B (MLPerf qwen35_397b_grpo's policy; mlcommons/training llm_moe_grpo/README.md "Model details").

Two models of it live in this folder:

- suite/models/qwen35/decoder.py: the text decoder as transformers 5.10.4's Qwen3_5MoeForCausalLM has it, written
  here: `layer_types` (every 4th layer full attention, the rest Gated DeltaNet: 45 of 60), the Gated DeltaNet mixer
  (causal depthwise conv1d, L2-normalised q/k, the gated delta rule as its float32 recurrence, gated RMSNorm with
  SiLU(z)), gated attention (q_proj's per-head output gate, q/k RMSNorm, rotary on 64 of the 256 head dimensions),
  zero-centred (1 + w) RMSNorms, softmax top-10 renormalised routing, the shared expert's sigmoid gate; transformers'
  parameter names map onto it (`load_hf_state_dict`). tests/models/test_qwen35_transformers.py: logits equal
  transformers' within 2e-4 in float32 on a tiny 3 + 1-layer config (measured 5.4e-5; transformers' own chunked and
  recurrent delta rules differ by 9.0e-5), one changed DeltaNet, conv, output-gate or shared-gate weight breaks it;
  the 397B shape's 396,346,350,336 parameters (17,349,040,896 active) equal transformers' on the meta device and
  model.py's. Left out there: the MTP head (transformers' causal LM has none either), the vision tower, padding
  masks, KV / recurrent caches and the router's load-balancing loss.
- `FAMILY` below: the presets `qwen3.5-397b-a17b` and `qwen3.5-moe-tiny` of the suite's generic MoE decoder
  (suite/models/llama/model.py), which is what `preset:` builds, and so what rl/qwen35_397b_grpo's policy is: the
  workload's generation (KV cache, left-padded prompts), its engines (torchtitan, Megatron, DeepSpeed), its
  analytic FLOPs and memory estimate all run that decoder, none of them decoder.py yet. That preset is 60 layers,
  width 4096, 512 routed experts (top-10, softmax renormalised) of width 1024 plus 1 shared expert, vocabulary
  248,320, untied, every layer the gated-attention layers' GQA shape (32 Q / 2 KV heads of 256) without the output
  gate, rotary on all head dimensions, no shared-expert gate, no DeltaNet; its checkpoints are not read: no
  `architectures`. Aux coefficient 0.001: transformers' Qwen3_5MoeTextConfig.router_aux_loss_coef (the reference
  freezes the router: freeze_moe_router).

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

"""Qwen3 (`Qwen3ForCausalLM`, transformers 5's modeling_qwen3): the Llama layer with an RMSNorm over each head's query
and key before rotary (`q_norm` / `k_norm`, the decoder's `qk_norm` trait), no q/k/v-only biases (`attention_bias`,
read for every family, biases all four), tied embeddings in the small sizes. Sliding-window attention is refused:
the suite's decoder attends over the whole causal context. The q/k norm tensors' Hugging Face names are the
trait's, in the decoder's map (suite/models/llama/model.py HF_TO_SUITE): nothing else differs from Llama's.

Shapes (Qwen/Qwen3-0.6B and Qwen/Qwen3-8B config.json, as torchtitan 0.3.0's models/qwen3 `_0_6b` / `_8b` build
them): vocabulary 151,936, head_dim 128 (not d_model / n_head), rope theta 1e6, RMSNorm eps 1e-6. seq_len 4096 is
a training context chosen here (the checkpoints' max_position_embeddings is 40960). `qwen3-tiny` keeps the
structure (GQA 4/2, head_dim apart from d_model / n_head, q/k norms) at CPU size, untied.

May import what `suite.models` may.
"""

from __future__ import annotations

from suite.models.family import Family, refuse_sliding_window, write_full_attention

_QWEN3 = {"vocab_size": 151936, "seq_len": 4096, "head_dim": 128, "rope_theta": 1000000.0, "norm_eps": 1e-6,
          "qk_norm": True}


FAMILY = Family(
    name="qwen3", architectures=("Qwen3ForCausalLM",), model_type="qwen3", traits={"qk_norm": True},
    read=refuse_sliding_window, write=write_full_attention,
    presets={
        "qwen3-0.6b": {**_QWEN3, "n_layer": 28, "d_model": 1024, "n_head": 16, "n_kv_head": 8, "ffn_dim": 3072,
                       "tie_embeddings": True},
        "qwen3-8b": {**_QWEN3, "n_layer": 36, "d_model": 4096, "n_head": 32, "n_kv_head": 8, "ffn_dim": 12288,
                     "tie_embeddings": False},
        "qwen3-tiny": {"vocab_size": 256, "seq_len": 32, "n_layer": 2, "d_model": 64, "n_head": 4, "n_kv_head": 2,
                       "head_dim": 32, "ffn_dim": 96, "rope_theta": 1000000.0, "norm_eps": 1e-6, "qk_norm": True,
                       "tie_embeddings": False},
    },
    tiny={"qwen3-0.6b": "qwen3-tiny", "qwen3-8b": "qwen3-tiny"},
)

"""The Llama family and the Llama-class decoder every family here builds on (`arch: llama`): the decoder, dense or
MoE (`model`), the union of every registered family's shapes (`presets`), and here the Llama family's declaration
(`FAMILY`): Hugging Face `LlamaForCausalLM` (dense, no q/k/v-only biases, no q/k norms) and the Llama 3.1 / Llama 2
shapes. Sources: config.json of meta-llama/Llama-3.1-8B, -70B, -405B and meta-llama/Llama-2-70b-hf, read through
transformers 5.10's config classes. The `llama3.1-tiny` preset keeps Llama 3.1's structure (GQA, rope scaling) at
CPU size; its `rope_scaling.original_max_position_embeddings` is small so that the scaling really changes
frequencies at a 16-32 token context.

May import what `suite.models` may.
"""

from __future__ import annotations

from suite.models.family import Family

_LLAMA31_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                 "original_max_position_embeddings": 8192}
_LLAMA31 = {"vocab_size": 128256, "seq_len": 8192, "rope_theta": 500000.0, "rope_scaling": _LLAMA31_ROPE,
            "norm_eps": 1e-5, "tie_embeddings": False}

FAMILY = Family(
    name="llama", architectures=("LlamaForCausalLM",), model_type="llama",
    presets={
        "llama3.1-8b": {**_LLAMA31, "n_layer": 32, "d_model": 4096, "n_head": 32, "n_kv_head": 8, "ffn_dim": 14336},
        "llama3.1-70b": {**_LLAMA31, "n_layer": 80, "d_model": 8192, "n_head": 64, "n_kv_head": 8,
                         "ffn_dim": 28672},
        "llama3.1-405b": {**_LLAMA31, "n_layer": 126, "d_model": 16384, "n_head": 128, "n_kv_head": 8,
                          "ffn_dim": 53248},
        # Llama 2 70B (meta-llama/Llama-2-70b-hf config.json): the base of MLPerf's llama2_70b_lora; 4096 context
        "llama2-70b": {"vocab_size": 32000, "seq_len": 4096, "n_layer": 80, "d_model": 8192, "n_head": 64,
                       "n_kv_head": 8, "ffn_dim": 28672, "rope_theta": 10000.0, "norm_eps": 1e-5,
                       "tie_embeddings": False},
        "llama3.1-tiny": {"vocab_size": 256, "seq_len": 32, "n_layer": 2, "d_model": 64, "n_head": 4,
                          "n_kv_head": 2, "ffn_dim": 160, "rope_theta": 500000.0, "norm_eps": 1e-5,
                          "tie_embeddings": False,
                          "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 64}},
    },
    tiny={"llama3.1-8b": "llama3.1-tiny", "llama3.1-70b": "llama3.1-tiny", "llama3.1-405b": "llama3.1-tiny",
          "llama2-70b": "llama3.1-tiny"},  # dense GQA as Llama 2 70B (its rope has no 3.1 scaling)
)

"""Qwen2 (`Qwen2ForCausalLM`): Llama layers with biases on q, k and v and none on o (the `qkv_bias` trait); the
small Qwen2.5 tie their embeddings (config.json's `tie_word_embeddings`, read for every family). Sliding-window
attention is refused: the suite's decoder attends over the whole causal context.

May import what `suite.models` may.
"""

from __future__ import annotations

from typing import Any

from suite.models.family import Family, refuse_sliding_window, write_full_attention


def _write(cfg: Any, out: dict[str, Any]) -> None:
    write_full_attention(cfg, out)
    del out["attention_bias"]  # Qwen2Config has none: its q/k/v biases are the architecture's


FAMILY = Family(name="qwen2", architectures=("Qwen2ForCausalLM",), model_type="qwen2", traits={"qkv_bias": True},
                read=refuse_sliding_window, write=_write)

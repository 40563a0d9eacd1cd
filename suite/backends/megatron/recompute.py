"""`parallel.ac` in Megatron-core: TransformerConfig's recompute fields, and the recompute share for HFU."""

from __future__ import annotations

from typing import Any


def recompute_config(ac: str) -> dict[str, Any]:
    """`parallel.ac` as Megatron's TransformerConfig: full recomputes every transformer layer (uniform, one
    layer a unit, as torch's per-block checkpoint); selective recomputes Megatron's default module, the core
    attention (softmax(QK^T)V: the activations that grow with the sequence squared)."""
    if ac == "full":
        return {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    if ac == "selective":
        return {"recompute_granularity": "selective", "recompute_modules": ["core_attn"]}
    return {}


def recompute_fraction(ac: str, cfg: Any, vocab: int) -> float:
    """The share of the forward's FLOPs re-run in backward, for HFU. Forward per token: a third of PaLM's
    6N + 12·L·d·T. full: the layers (2 x their parameters) and attention (4·L·d·T), as torch's (parallel/
    checkpoint.py); selective: core attention only (QK^T and AV: 4·L·d·T)."""
    if ac == "none":
        return 0.0
    d, L, t = cfg.d_model, cfg.n_layer, cfg.seq_len
    block_params = L * (4 + 2 * cfg.mlp_ratio) * d * d
    forward = (6 * (block_params + vocab * d) + 12 * L * d * t) / 3
    attention = 4 * L * d * t
    return (2 * block_params + attention if ac == "full" else attention) / forward

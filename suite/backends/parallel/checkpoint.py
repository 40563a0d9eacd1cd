"""Activation checkpointing per block: `full` recomputes each block's forward in backward; `selective` keeps
the outputs of matmuls and attention (the FLOP-heavy ops) and recomputes the rest (norms, GELU, adds), as
torchtitan's op-level selective AC. `recompute_fraction` is the share of the forward done again, for HFU.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

# ops whose outputs selective AC saves (torchtitan's _save_list, minus the CUDA-only kernels)
_SAVE = {
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten.bmm.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
}


def _selective_context() -> Any:
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def policy(_ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        return CheckpointPolicy.MUST_SAVE if op in _SAVE else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


# model archs besides the GPT whose transformer layers apply_ac wraps (the spec-level check, before a build)


def _layers(model: nn.Module) -> nn.ModuleList | None:
    """The model's transformer layers: the GPT's `blocks`, the Llama-class decoder's `layers` (under peft's LoRA
    wrapper too: its base model's)."""
    for m in (model, getattr(model, "base_model", None), getattr(getattr(model, "base_model", None), "model", None)):
        for name in ("blocks", "layers"):
            layers = getattr(m, name, None) if m is not None else None
            if isinstance(layers, nn.ModuleList):
                return layers
    return None


def ac_unsupported(model: nn.Module) -> str | None:
    if _layers(model) is None:
        return ("activation checkpointing (--ac) wraps the model's transformer layers (`blocks` or `layers`); "
                "this model has none")
    return None


def apply_ac(model: nn.Module, mode: str) -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if mode == "none":
        return
    blocks = _layers(model)
    assert blocks is not None, ac_unsupported(model)
    for i, block in enumerate(blocks):
        if mode == "full":
            blocks[i] = checkpoint_wrapper(block, preserve_rng_state=False)
        else:
            blocks[i] = checkpoint_wrapper(block, preserve_rng_state=False, context_fn=_selective_context)


def recompute_fraction(mode: str, model: nn.Module) -> float:
    """The share of the forward's FLOPs re-run in backward (the `Backend.recompute_fraction` hook for HFU).

    The forward is a third of PaLM's 6N + 12·L·d·T per token. full: every block's forward runs again, its
    matmuls (2 x block parameters) and attention (4·L·d·T); the embedding and LM head are not recomputed.
    selective saves every matmul and attention output, so it recomputes no matmul FLOPs (only elementwise
    work, which model FLOPs do not count): 0.
    """
    cfg = getattr(model, "cfg", None)
    if mode != "full" or cfg is None:
        return 0.0
    if hasattr(cfg, "kv_heads"):  # the Llama-class decoder: its own count of active matmul parameters
        return _llama_recompute(model, cfg)
    d, L, t = cfg.d_model, cfg.n_layer, cfg.seq_len
    block_params = L * (4 + 2 * cfg.mlp_ratio) * d * d
    vocab = int(model.wte.weight.shape[0]) if hasattr(model, "wte") else 0
    recomputed = 2 * block_params + 4 * L * d * t
    forward = (6 * (block_params + vocab * d) + 12 * L * d * t) / 3
    return recomputed / forward


def _llama_recompute(model: nn.Module, cfg: Any) -> float:
    """full AC on the Llama-class decoder: every layer's forward again, its matmuls over the active parameters (the
    routed experts a token uses, the router, shared experts) and its attention (4·L·H·Q·T per token: a third of the
    12·L·H·Q·T the FLOPs count); the output head is not recomputed. Forward = 2·N_active + 4·L·H·Q·T."""
    from suite.models.llama import model as llama

    vocab = int(model.output.weight.shape[0])
    active = llama.active_matmul_params(cfg, {"vocab_size": vocab})
    attention = llama.attention_flops_per_token(cfg) / 3
    layers = 2 * (active - vocab * cfg.d_model) + attention
    return layers / (2 * active + attention)

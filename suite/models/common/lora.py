"""LoRA adapters on the Llama-class decoder, injected by Hugging Face `peft` (it wraps any nn.Linear by name), the
base frozen; and the FLOPs of a step with a frozen base (docs/metrics.md, "Frozen base (LoRA)").

Target names are the suite's linear layers (wq, wk, wv, wo, w1, w2, w3, output; wqkv with `fused_qkv`) or Hugging
Face's (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head); `qkv_proj` (the MLPerf reference's
fused-QKV checkpoint) targets wq, wk and wv (three adapters), or with `model.fused_qkv` the one fused wqkv: ONE
adapter over q, k and v, the reference's (A rank x d_model, B (q + k + v) x rank). Megatron's fused names are accepted too (linear_qkv, linear_proj, linear_fc1, linear_fc2); under
--backend megatron each is ONE adapter over the fused layer (suite/backends/megatron/lora.py). Mixture-of-Experts
experts are stacked tensors, not nn.Linear: peft cannot target them.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from suite.models.common.configs import (
    LoraConfig,
)


def apply(model: nn.Module, cfg: LoraConfig) -> nn.Module:
    """peft's adapters injected in place (no PeftModel wrapper: the suite's model keeps its forward and names);
    every base parameter frozen, only `lora_A` / `lora_B` train. B starts at zero: the model's output is
    unchanged until the first step."""
    import peft

    targets = cfg.suite_targets(has_fused_qkv(model))
    peft_cfg = peft.LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, bias="none",
                               target_modules=targets)
    model = peft.inject_adapter_in_model(peft_cfg, model)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"lora.target_modules {cfg.target_modules} matched no layer of the model")
    return model


def has_fused_qkv(model_or_cfg: Any) -> bool:
    """Whether a suite Llama (or its config) has the one fused wqkv."""
    cfg = getattr(model_or_cfg, "cfg", model_or_cfg)
    return bool(getattr(cfg, "fused_qkv", False))


def adapter_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [p for n, p in model.named_parameters() if "lora_" in n]


# ---- shapes and FLOPs ----------------------------------------------------------------------------------------


def _linear_shapes(cfg: Any, vocab: int) -> dict[str, tuple[int, int, int]]:
    """name -> (in, out, how many in the model) of each linear layer of a llama.Config's model."""
    d, hd, layers = cfg.d_model, cfg.head_size, cfg.n_layer
    dense = sum(1 for i in range(layers) if not cfg.is_moe(i))
    return {"wq": (d, cfg.n_head * hd, layers), "wk": (d, cfg.kv_heads * hd, layers),
            "wv": (d, cfg.kv_heads * hd, layers), "wqkv": (d, (cfg.n_head + 2 * cfg.kv_heads) * hd, layers), "wo": (cfg.n_head * hd, d, layers),
            "w1": (d, cfg.ffn_dim, dense), "w3": (d, cfg.ffn_dim, dense), "w2": (cfg.ffn_dim, d, dense),
            "output": (d, vocab, 1)}


def adapter_param_count(cfg: Any, lora: LoraConfig, vocab: int) -> int:
    """rank x (in + out) per adapted layer: A is (rank, in), B is (out, rank). qkv_proj with fused_qkv is one
    adapter, r (d + q + 2 kv): MLPerf's llama2_70b_lora (r 16 on qkv_proj and o_proj, 80 layers of 8192 wide, 64
    query and 8 key/value heads of 128) has 16 x ((8192 + 10240) + (8192 + 8192)) x 80 = 44,564,480, the
    reference's; three on wq, wk, wv have 65,536,000 (two more A of 16 x 8192 a layer)."""
    shapes = _linear_shapes(cfg, vocab)
    return sum(lora.rank * (shapes[t][0] + shapes[t][1]) * shapes[t][2] for t in lora.suite_targets(has_fused_qkv(cfg)))


def flops_per_token(cfg: Any, lora: LoraConfig, meta: dict[str, Any]) -> float:
    """Forward + backward FLOPs per token with a frozen base (docs/metrics.md):
    4 N_base + 6 N_adapter + 12 L H Q T, less the input gradient of layer 0's q/k/v projections (and their
    adapters' A), which autograd never computes: nothing below them trains.

    N_base: the active matmul parameters (as in 6N), each used in the forward (2N) and once in backward for the
    input gradient (2N); no weight gradient (frozen). N_adapter: forward, input and weight gradient (6N).
    Attention's score and value products have no weights: their backward is all input gradient (12 L H Q T, as
    for full training). Exact for target sets that include wq, wk and wv, or the fused wqkv (MLPerf's qkv_proj,
    o_proj); with other targets layer 0 needs even less backward, and this counts it."""
    from suite.models.llama import model as llama

    vocab = llama.vocab(cfg, meta)
    n_base = llama.active_matmul_params(cfg, meta)
    n_adapter = adapter_param_count(cfg, lora, vocab)
    shapes = _linear_shapes(cfg, vocab)
    targets = lora.suite_targets(has_fused_qkv(cfg))
    first = sum(shapes[t][0] * shapes[t][1] + (lora.rank * shapes[t][0] if t in targets else 0)
                for t in (("wqkv",) if has_fused_qkv(cfg) else ("wq", "wk", "wv")))
    return 4.0 * n_base + 6.0 * n_adapter + llama.attention_flops_per_token(cfg) - 2.0 * first

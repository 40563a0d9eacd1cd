"""Mixtral (`MixtralForCausalLM`): Llama attention, every layer a softmax top-k Mixture-of-Experts renormalised over
the k, no shared experts (the `moe` trait). On disk its experts are stored one by one
(`block_sparse_moe.experts.E.w1/w2/w3`, stacked by suite/models/hf/tensors.py). Its `router_aux_loss_coef` weighs a
loss top_k times the suite block's (tests/models/test_moe.py), so it is scaled by top_k both ways.

May import what `suite.models` may.
"""

from __future__ import annotations

from typing import Any

from suite.models.family import Family, count


def _read(hf: dict[str, Any], fields: dict[str, Any]) -> None:
    if hf.get("sliding_window"):
        raise ValueError(f"sliding_window {hf['sliding_window']} (full causal attention only)")
    fields["moe"] = {"experts": count(hf, "num_local_experts"), "top_k": count(hf, "num_experts_per_tok"),
                     "expert_ffn_dim": count(hf, "intermediate_size"), "score": "softmax",
                     "normalize_top_k": True,
                     "aux_loss_coeff": float(hf.get("router_aux_loss_coef", 0.0)) * int(hf["num_experts_per_tok"])}


def _write(cfg: Any, out: dict[str, Any]) -> None:
    moe = cfg.moe
    if moe.score != "softmax" or not moe.normalize_top_k or moe.shared_experts or cfg.dense_layers:
        raise ValueError("only Mixtral-form MoE (softmax, renormalised top-k, no shared experts, every layer "
                         "MoE) has a Hugging Face layout here")
    out.update(intermediate_size=moe.expert_ffn_dim, num_local_experts=moe.experts, num_experts_per_tok=moe.top_k,
               sliding_window=None, router_aux_loss_coef=moe.aux_loss_coeff / moe.top_k)


FAMILY = Family(name="mixtral", architectures=("MixtralForCausalLM",), model_type="mixtral", traits={"moe": True},
                read=_read, write=_write)

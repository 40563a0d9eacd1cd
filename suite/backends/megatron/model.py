"""The suite GPT's weights under Megatron-core's names and layouts (TP shards, this pipeline stage's layers), Transformer
Engine's renames, and the layer spec a GPTModel is built with."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def tp_shard(t: torch.Tensor, dim: int, rank: int, tp: int) -> torch.Tensor:
    """This TP rank's contiguous slice: dim 0 for a column-parallel layer's rows, dim 1 for a row-parallel input."""
    return t.chunk(tp, dim=dim)[rank].contiguous()


def vocab_shard(w: torch.Tensor, padded_vocab: int, rank: int, tp: int) -> torch.Tensor:
    """An embedding or LM head [vocab, d] padded with zero rows to `padded_vocab` (a multiple of tp), this TP rank's
    rows. Padded rows see no gradient: the loss only reads the real vocabulary (megatron_step.MegatronSteps.loss)."""
    if padded_vocab > w.shape[0]:
        w = torch.cat([w, w.new_zeros(padded_vocab - w.shape[0], w.shape[1])])
    return tp_shard(w, 0, rank, tp)


def megatron_state(ref: Any, n_head: int, tp: int, tp_rank: int, padded_vocab: int,
                   layers: range | None = None, pre_process: bool = True, post_process: bool = True,
                   ) -> dict[str, torch.Tensor]:
    """The reference GPT's weights under Megatron's names and layouts: this TP rank's shard of this pipeline
    stage (`layers`, numbered from 0 within the stage; the embeddings on the first stage, the final norm
    and LM head on the last; a tied LM head on a last stage that has no embedding gets the embedding)."""
    sd = {k: v.detach() for k, v in ref.state_dict().items()}
    d = sd["wte.weight"].shape[1]
    head_dim = d // n_head
    wte = sd["wte.weight"]
    out: dict[str, torch.Tensor] = {}
    if pre_process:
        out["embedding.word_embeddings.weight"] = vocab_shard(wte, padded_vocab, tp_rank, tp)
        out["embedding.position_embeddings.weight"] = sd["wpe.weight"]
    if post_process:
        out["decoder.final_layernorm.weight"] = sd["ln_f.weight"]
        if "ln_f.bias" in sd:
            out["decoder.final_layernorm.bias"] = sd["ln_f.bias"]
        if "lm_head.weight" in sd and not ref.cfg.tie_embeddings:
            out["output_layer.weight"] = vocab_shard(sd["lm_head.weight"], padded_vocab, tp_rank, tp)
        elif not pre_process:
            out["output_layer.weight"] = vocab_shard(wte, padded_vocab, tp_rank, tp)
    layers = range(ref.cfg.n_layer) if layers is None else layers
    for local, i in enumerate(layers):
        p, m = f"blocks.{i}.", f"decoder.layers.{local}."
        # Megatron's fused QKV is grouped per head ([q_h; k_h; v_h] for each head); ours is [Q; K; V]
        qkv = sd[p + "qkv.weight"].view(3, n_head, head_dim, d).transpose(0, 1).reshape(3 * d, d)
        out[m + "self_attention.linear_qkv.weight"] = tp_shard(qkv, 0, tp_rank, tp)
        out[m + "self_attention.linear_proj.weight"] = tp_shard(sd[p + "proj.weight"], 1, tp_rank, tp)
        out[m + "input_layernorm.weight"] = sd[p + "ln_1.weight"]
        out[m + "pre_mlp_layernorm.weight"] = sd[p + "ln_2.weight"]
        out[m + "mlp.linear_fc1.weight"] = tp_shard(sd[p + "fc.weight"], 0, tp_rank, tp)
        out[m + "mlp.linear_fc2.weight"] = tp_shard(sd[p + "fc_out.weight"], 1, tp_rank, tp)
        if ref.cfg.bias:
            qkv_b = sd[p + "qkv.bias"].view(3, n_head, head_dim).transpose(0, 1).reshape(3 * d)
            out[m + "self_attention.linear_qkv.bias"] = tp_shard(qkv_b, 0, tp_rank, tp)
            out[m + "self_attention.linear_proj.bias"] = sd[p + "proj.bias"]
            out[m + "input_layernorm.bias"] = sd[p + "ln_1.bias"]
            out[m + "pre_mlp_layernorm.bias"] = sd[p + "ln_2.bias"]
            out[m + "mlp.linear_fc1.bias"] = tp_shard(sd[p + "fc.bias"], 0, tp_rank, tp)
            out[m + "mlp.linear_fc2.bias"] = sd[p + "fc_out.bias"]
    return out


class MegatronGPT(nn.Module):
    """Calls like the suite GPT: token ids [b, t] -> full-vocabulary logits [b, t, vocab] (gathered over TP).

    The workload's own loss and evaluation then run unchanged; the gather's backward hands each TP rank
    the gradient of its vocabulary shard.
    """

    def __init__(self, gpt: nn.Module, vocab_size: int):
        super().__init__()
        self.gpt = gpt
        self.vocab_size = vocab_size

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        pos = torch.arange(t, device=idx.device).unsqueeze(0).expand(b, t)
        # Megatron's default causal mask is built on "cuda"; an explicit one (True = masked) is the same mask
        mask = torch.ones(t, t, dtype=torch.bool, device=idx.device).triu(1).view(1, 1, t, t)
        logits = self.gpt(idx, pos, mask, runtime_gather_output=True)
        return logits[..., : self.vocab_size]


def te_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Transformer Engine's layer spec fuses each pre-norm into the next linear layer (its weight renamed)."""
    renames = {"input_layernorm.": "self_attention.linear_qkv.layer_norm_",
               "pre_mlp_layernorm.": "mlp.linear_fc1.layer_norm_"}
    out = {}
    for k, v in state.items():
        for old, new in renames.items():
            if f".{old}" in k:
                k = k.replace(old, new)
        out[k] = v
    return out


def layer_spec(on_cuda: bool, llama: Any = None) -> Any:
    """Transformer Engine's layer spec on CUDA where it imports, else Megatron's local one. The Llama (its
    TransformerConfig given) takes the local spec with RMSNorm and, for MoE, Megatron's MoE layer."""
    import importlib.util

    from megatron.core.models.gpt import gpt_layer_specs

    if llama is not None:
        if llama.num_moe_experts:
            return gpt_layer_specs.get_gpt_decoder_block_spec(llama, use_transformer_engine=False,
                                                              normalization="RMSNorm")
        return gpt_layer_specs.get_gpt_layer_local_spec(normalization="RMSNorm", qk_layernorm=llama.qk_layernorm)
    if on_cuda and importlib.util.find_spec("transformer_engine") is not None:
        return gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec()
    return gpt_layer_specs.get_gpt_layer_local_spec()

"""The suite Llama (suite/models/llama/model.py, dense or Mixture-of-Experts; `arch: hf_llama` loaded from a Hugging Face
checkpoint too) as a Megatron-core GPTModel: its TransformerConfig (RMSNorm, SwiGLU, RoPE, GQA, untied embeddings;
MoE with Megatron's TopKRouter, its Switch load-balancing loss and expert parallelism) and its weights under
Megatron's names, this rank's tensor-parallel shard of this pipeline stage, for the local layer spec.

What maps: softmax top-k routing renormalised over the k (Megatron's default: softmax over the top-k logits),
DeepSeek-V3's sigmoid routing (its expert bias, never updated here as in the suite's model, group-limited top-k,
routed_scaling as moe_router_topk_scaling_factor), the aux-loss coefficient, shared experts, dense-then-MoE layers (`moe_layer_freq`); tp x pp for the dense model (GQA's
qkv split by whole query groups, the gated fc1 as [gate; up] per rank). Llama 3.1's rope scaling: Megatron 0.16
hard-codes original_max_position_embeddings 8192 in its scaling, so the suite's frequencies
(llm_layers.rope_inv_freq) are set on its RotaryEmbedding instead. Attention biases: `qkv_bias` (Qwen2) is
Megatron's `add_qkv_bias`; `qk_norm` (Qwen3's per-head q/k RMSNorm before rotary) is its `qk_layernorm`; `attention_bias` (gpt-oss: q, k, v and o) is `add_bias_linear`, which also gives the MLP,
the experts and the router biases the suite's decoder lacks: those are removed (`drop_biases`). gpt-oss's
attention sinks: megatron-core 0.16.1 has them (`softmax_type: learnable`, a per-head softmax offset), the suite's
decoder does not, so there is nothing to map (suite/models/llama/presets.py). Refused (`refusal`): unnormalised top-k
scores, tied embeddings, tp not dividing n_kv_head, MoE
with tp > 1 (Megatron's MoELayer refuses to train under tensor parallelism without sequence parallelism, which
needs Transformer Engine's layer spec; the Llama builds the local one). LoRA (`hf_llama` with `lora:`) uses
Megatron's own adapters: suite/backends/megatron/lora.py.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.backends.megatron.llama_refusals import (
    uneven_split,
)
from suite.backends.megatron.model import tp_shard, vocab_shard


def stage_layers(n_layer: int, pp: int, stage: int) -> range:
    """The layers of pipeline stage `stage` as Megatron builds them (even, or `uneven_split`)."""
    from suite.backends.parallel.pipeline_llama import stage_bounds

    split = uneven_split(n_layer, pp)
    return stage_bounds(n_layer, pp, *split)[stage] if split else stage_bounds(n_layer, pp)[stage]


def dispatcher(on_cuda: bool) -> str:
    """Megatron's token dispatcher: all-to-all on CUDA (its default for expert parallelism); on a CPU build of torch
    all-gather (each rank gathers the ep group's tokens, runs its experts on those routed to them, and the outputs
    are reduce-scattered back), since the all-to-all dispatcher creates CUDA streams."""
    return "alltoall" if on_cuda else "allgather"


def transformer_config(cfg: Any, ep: int, token_dispatcher: str = "alltoall", pp: int = 1) -> dict[str, Any]:
    """TransformerConfig fields of the Llama config (the caller adds parallelism, dtype and kernel switches); with
    pp not dividing the layers, Megatron's first/last stage sizes (`uneven_split`)."""
    out: dict[str, Any] = dict(
        num_layers=cfg.n_layer, hidden_size=cfg.d_model, num_attention_heads=cfg.n_head,
        num_query_groups=cfg.kv_heads, kv_channels=cfg.head_size, ffn_hidden_size=cfg.ffn_dim,
        normalization="RMSNorm", layernorm_epsilon=cfg.norm_eps, gated_linear_unit=True, activation_func=F.silu,
        add_bias_linear=cfg.attention_bias, add_qkv_bias=cfg.qkv_bias, hidden_dropout=0.0, attention_dropout=0.0,
        init_method_std=cfg.init_std, qk_layernorm=bool(getattr(cfg, "qk_norm", False)))
    split = uneven_split(cfg.n_layer, pp)
    if split:
        out.update(num_layers_in_first_pipeline_stage=split[0], num_layers_in_last_pipeline_stage=split[1])
    m = cfg.moe
    if m is not None:
        out.update(
            num_moe_experts=m.experts, moe_router_topk=m.top_k, moe_ffn_hidden_size=m.expert_ffn_dim,
            moe_aux_loss_coeff=m.aux_loss_coeff, moe_router_load_balancing_type="aux_loss",
            moe_router_pre_softmax=False, moe_token_dispatcher_type=token_dispatcher, moe_grouped_gemm=False,
            # DeepSeek-V3's routing: sigmoid scores, an expert bias for the choice (held, never updated, as the
            # suite's: Megatron's update rate 0), the best topk_groups of groups, routed_scaling
            moe_router_score_function=m.score, moe_router_enable_expert_bias=m.score_bias,
            moe_router_bias_update_rate=0.0, moe_router_topk_scaling_factor=m.routed_scaling,
            moe_router_num_groups=m.groups if m.groups > 1 else None,
            moe_router_group_topk=m.topk_groups if m.groups > 1 else None,
            moe_layer_freq=[0] * cfg.dense_layers + [1] * (cfg.n_layer - cfg.dense_layers),
            expert_model_parallel_size=ep,
            moe_shared_expert_intermediate_size=(m.expert_ffn_dim * m.shared_experts) or None)
    return out


def gpt_kwargs(cfg: Any) -> dict[str, Any]:
    return dict(position_embedding_type="rope", rotary_base=int(cfg.rope_theta), rotary_percent=1.0,
                share_embeddings_and_output_weights=False)


def set_rope(gpt: nn.Module, cfg: Any) -> None:
    """The suite's inverse frequencies (Llama 3.1's scaling with this config's constants) on Megatron's rope."""
    from suite.models.common.layers import rope_inv_freq

    gpt.rotary_pos_emb.inv_freq = rope_inv_freq(cfg.head_size, cfg.rope_theta, cfg.rope_scaling)


def _fc1(w1: torch.Tensor, w3: torch.Tensor, tp: int = 1, tp_rank: int = 0) -> torch.Tensor:
    """Megatron's gated fc1: [gate; up] rows (its glu applies the activation to the first half of each rank's
    output), so under TP each rank holds [its gate rows; its up rows], not a slice of the concatenation."""
    return torch.cat([tp_shard(w1, 0, tp_rank, tp), tp_shard(w3, 0, tp_rank, tp)], dim=0)


def llama_state(ref: nn.Module, ep: int = 1, ep_rank: int = 0, tp: int = 1, tp_rank: int = 0,
                padded_vocab: int | None = None, layers: range | None = None, first: bool = True,
                last: bool = True) -> dict[str, torch.Tensor]:
    """The suite Llama's weights under Megatron's names: this TP rank's shard of this pipeline stage (`layers`,
    numbered from 0 within the stage; the embedding on the first stage, the final norm and output layer on the
    last; the vocabulary padded to `padded_vocab` as megatron_model.megatron_state pads it), and under expert
    parallelism this rank's experts only. Norms and the router are replicated. (Experts and shared experts are
    split over tp as a dense MLP is, Megatron's expert tensor parallelism at its default size, but `refusal`
    keeps MoE at tp=1: see the module's docstring.)"""
    cfg = ref.cfg  # type: ignore[union-attr]
    sd = {k: v.detach() for k, v in ref.state_dict().items()}
    if getattr(cfg, "fused_qkv", False):  # the suite's one wqkv (rows [q; k; v]) as wq, wk, wv, regrouped below
        from suite.models.llama import model as llama

        sd = llama.split_qkv(sd, cfg)
    d, hd, groups = cfg.d_model, cfg.head_size, cfg.kv_heads
    if groups % tp or cfg.n_head % tp:
        raise ValueError(f"tensor parallelism tp={tp} must divide model.n_kv_head={groups} and model.n_head="
                         f"{cfg.n_head} (each rank holds whole query groups)")
    vocab = padded_vocab or sd["tok_embeddings.weight"].shape[0]
    out: dict[str, torch.Tensor] = {}
    if first:
        out["embedding.word_embeddings.weight"] = vocab_shard(sd["tok_embeddings.weight"], vocab, tp_rank, tp)
    if last:
        out["decoder.final_layernorm.weight"] = sd["norm.weight"]
        out["output_layer.weight"] = vocab_shard(sd["output.weight"], vocab, tp_rank, tp)
    for local, i in enumerate(range(cfg.n_layer) if layers is None else layers):
        p, m = f"layers.{i}.", f"decoder.layers.{local}."
        # Megatron's qkv for GQA is grouped per key/value head: [q of the group's heads; k; v] for each group; a TP
        # rank holds groups/tp whole groups (its column-parallel rows are a contiguous slice of that layout)
        q = sd[p + "attention.wq.weight"].view(groups, -1, d)
        k = sd[p + "attention.wk.weight"].view(groups, hd, d)
        v = sd[p + "attention.wv.weight"].view(groups, hd, d)
        out[m + "self_attention.linear_qkv.weight"] = tp_shard(torch.cat([q, k, v], dim=1).reshape(-1, d), 0,
                                                             tp_rank, tp)
        if cfg.attention_bias or cfg.qkv_bias:  # the biases in the same per-group rows as the weight's
            qb, kb, vb = (sd[p + f"attention.w{x}.bias"].view(groups, -1) for x in "qkv")
            out[m + "self_attention.linear_qkv.bias"] = tp_shard(torch.cat([qb, kb, vb], dim=1).reshape(-1), 0,
                                                               tp_rank, tp)
        if cfg.attention_bias:  # row-parallel: the bias is added once, after the reduction (whole on every rank)
            out[m + "self_attention.linear_proj.bias"] = sd[p + "attention.wo.bias"]
        if getattr(cfg, "qk_norm", False):  # per-head norms (one head_dim weight each), whole on every rank
            out[m + "self_attention.q_layernorm.weight"] = sd[p + "attention.q_norm.weight"]
            out[m + "self_attention.k_layernorm.weight"] = sd[p + "attention.k_norm.weight"]
        # row-parallel: the input columns of this rank's heads
        out[m + "self_attention.linear_proj.weight"] = tp_shard(sd[p + "attention.wo.weight"], 1, tp_rank, tp)
        out[m + "input_layernorm.weight"] = sd[p + "attention_norm.weight"]
        out[m + "pre_mlp_layernorm.weight"] = sd[p + "ffn_norm.weight"]
        if not cfg.is_moe(i):
            f = p + "feed_forward."
            out[m + "mlp.linear_fc1.weight"] = _fc1(sd[f + "w1.weight"], sd[f + "w3.weight"], tp, tp_rank)
            out[m + "mlp.linear_fc2.weight"] = tp_shard(sd[f + "w2.weight"], 1, tp_rank, tp)
            continue
        e = p + "moe."
        out[m + "mlp.router.weight"] = sd[e + "router.weight"]
        if cfg.moe.score_bias:
            out[m + "mlp.router.expert_bias"] = sd[e + "router.score_bias"]
        local_experts = cfg.moe.experts // ep
        for j in range(local_experts):
            x = ep_rank * local_experts + j
            out[m + f"mlp.experts.local_experts.{j}.linear_fc1.weight"] = _fc1(
                sd[e + "experts.w1"][x], sd[e + "experts.w3"][x], tp, tp_rank)
            out[m + f"mlp.experts.local_experts.{j}.linear_fc2.weight"] = tp_shard(sd[e + "experts.w2"][x], 1,
                                                                                 tp_rank, tp)
        if cfg.moe.shared_experts:
            out[m + "mlp.shared_experts.linear_fc1.weight"] = _fc1(sd[e + "shared.w1.weight"],
                                                                   sd[e + "shared.w3.weight"], tp, tp_rank)
            out[m + "mlp.shared_experts.linear_fc2.weight"] = tp_shard(sd[e + "shared.w2.weight"], 1, tp_rank, tp)
    return out


def unmapped_bias(name: str, cfg: Any) -> bool:
    """A Megatron bias the suite Llama has no counterpart of: with `attention_bias` Megatron's `add_bias_linear` also
    puts biases on the MLP's two linears, the experts' and the router (gpt-oss has those; the suite's decoder does
    not). `drop_biases` removes them, so the model is the suite's."""
    return bool(cfg.attention_bias) and name.endswith(".bias") and ".mlp." in name


def drop_biases(model: nn.Module, cfg: Any) -> list[str]:
    """The `unmapped_bias` parameters removed (the module's bias set to None, which Megatron's linear layers, its
    bias-dropout-add and its router read as no bias); their names. Removed rather than pinned at zero:
    megatron-core 0.16.1's expert MLP with a bias adds it in place to a view in training (mlp.py:247, "Output 0 of
    _ReduceFromModelParallelRegion is a view and is being modified inplace") on the local layer spec."""
    dropped = [n for n, _ in model.named_parameters() if unmapped_bias(n, cfg)]
    for name in dropped:
        owner = model.get_submodule(name.rsplit(".", 1)[0])
        owner.bias = None  # type: ignore[assignment]
    return dropped


def expert_param_names(model: nn.Module) -> list[str]:
    """Megatron marks expert parameters `allreduce = False`: data parallelism must not average them."""
    return [n for n, p in model.named_parameters() if not getattr(p, "allreduce", True)]


@torch.no_grad()
def reduce_dense_grads(model: nn.Module, data_parallel: int) -> None:
    """CPU path under pp x dp (no torch DDP: see the backend): every non-expert gradient averaged over Megatron's
    data-parallel group."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    group = parallel_state.get_data_parallel_group()
    for p in model.parameters():
        if getattr(p, "allreduce", True) and p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad /= data_parallel


@torch.no_grad()
def reduce_expert_grads(model: nn.Module, data_parallel: int) -> None:
    """CPU path (torch DDP averages the dense gradients over dp and leaves the experts alone): an expert's
    gradient sums the ep group's losses through the all-to-all; summed over the ranks holding the same experts
    (Megatron's expert-data-parallel group) and divided by the data-parallel size it is the global mean."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    group = parallel_state.get_expert_data_parallel_group()
    for p in model.parameters():
        if not getattr(p, "allreduce", True) and p.grad is not None:
            if dist.get_world_size(group) > 1:
                dist.all_reduce(p.grad, group=group)
            p.grad /= data_parallel

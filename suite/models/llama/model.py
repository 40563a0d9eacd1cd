"""A Llama-3-class decoder: RMSNorm, rotary embeddings with Llama 3.1's frequency scaling, grouped-query
attention, SwiGLU MLP, untied embeddings; optionally Mixture-of-Experts feed-forward layers (suite/models/common/moe.py)
after `dense_layers` dense ones (DeepSeek-V3's first_k_dense_replace).

Presets (`preset: llama3.1-8b`, ...) are in suite/models/llama/presets.py. `HF_TO_SUITE` maps Hugging Face
`LlamaForCausalLM` / `MixtralForCausalLM` / DeepSeek-V3 parameter names to this module's (`from_hf_state_dict`).
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.common.layers import (
    LayerCache,
    RMSNorm,
    Rotary,
    SwiGLU,
    apply_rotary,
    swiglu_params,
)
from suite.models.common.moe import MoE, moe_active_params, moe_total_params
from suite.models.llama.config import Config
from suite.registry import Component


def vocab(cfg: Config, meta: dict[str, Any]) -> int:
    v = cfg.vocab_size or meta.get("vocab_size")
    if not v:
        raise ValueError("model.vocab_size is not set and the data set does not declare one")
    return int(v)


class Attention(nn.Module):
    """Causal grouped-query attention: n_kv_head key/value heads, each shared by n_head / n_kv_head query heads.
    q, k and v are three linears (wq, wk, wv), or with `fused_qkv` one (wqkv, rows [q; k; v]) whose output is split."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.head_dim = cfg.head_size
        qkv_bias = cfg.attention_bias or cfg.qkv_bias
        self.qkv_sizes, self.fused = list(cfg.qkv_sizes), cfg.fused_qkv
        if self.fused:
            self.wqkv = nn.Linear(cfg.d_model, sum(self.qkv_sizes), bias=qkv_bias)
        else:
            self.wq = nn.Linear(cfg.d_model, self.qkv_sizes[0], bias=qkv_bias)
            self.wk = nn.Linear(cfg.d_model, self.qkv_sizes[1], bias=qkv_bias)
            self.wv = nn.Linear(cfg.d_model, self.qkv_sizes[2], bias=qkv_bias)
        self.wo = nn.Linear(cfg.n_head * self.head_dim, cfg.d_model, bias=cfg.attention_bias)
        if cfg.qk_norm:  # one norm over the head dimension, shared by every head
            self.q_norm, self.k_norm = RMSNorm(self.head_dim, cfg.norm_eps), RMSNorm(self.head_dim, cfg.norm_eps)
        self.qk_norm = cfg.qk_norm

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: LayerCache | None = None, keys: torch.Tensor | None = None) -> torch.Tensor:
        b, t, _ = x.shape
        parts = self.wqkv(x).split(self.qkv_sizes, dim=-1) if self.fused else (self.wq(x), self.wk(x), self.wv(x))
        q, k, v = (p.view(b, t, -1, self.head_dim).transpose(1, 2) for p in parts)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        mask, causal = None, True
        past = 0
        if cache is not None:  # generation: attend to every cached position plus the new ones, causally
            past = cache.length
            k, v = cache.extend(k, v)
            if past:
                causal = False
                if t > 1:
                    mask = torch.ones(t, past + t, dtype=torch.bool, device=x.device).tril(diagonal=past)
        if keys is not None:  # left padding: no query attends to a pad key (a pad query to itself only: no NaN)
            s = past + t
            allowed = torch.ones(t, s, dtype=torch.bool, device=x.device).tril(diagonal=past)
            own = torch.zeros(t, s, dtype=torch.bool, device=x.device)
            own[torch.arange(t), past + torch.arange(t)] = True
            mask, causal = (allowed[None, None] & keys[:, None, None, :s]) | own, False
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                           enable_gqa=k.shape[1] != q.shape[1])
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, cfg: Config, layer: int):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        # one of the two, so a layer's parameter names say which it is (and map to Hugging Face's by name)
        self.moe = MoE(cfg.d_model, cfg.moe) if cfg.moe is not None and cfg.is_moe(layer) else None
        self.feed_forward = None if self.moe is not None else SwiGLU(cfg.d_model, cfg.ffn_dim)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: LayerCache | None = None, keys: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, cache, keys)
        ffn = self.moe if self.moe is not None else self.feed_forward
        assert ffn is not None
        return x + ffn(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, cfg: Config, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(vocab_size, cfg.d_model)
        self.rotary = Rotary(cfg.head_size, cfg.rope_theta, cfg.rope_scaling)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = nn.Linear(cfg.d_model, vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, init_std) for every matrix, the residual projections (wo, w2) scaled by 1/sqrt(2 n_layer) (GPT-2's
        rule), zero biases and score biases, unit norms."""
        std, residual_std = self.cfg.init_std, self.cfg.init_std / math.sqrt(2 * self.cfg.n_layer)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p) if name.endswith("norm.weight") else nn.init.zeros_(p)
            else:
                nn.init.normal_(p, 0.0, residual_std if name.endswith(("wo.weight", "w2.weight", "w2")) else std)
        for name, buf in self.named_buffers():
            if name.endswith("score_bias"):
                nn.init.zeros_(buf)

    def forward(self, idx: torch.Tensor, cache: list[LayerCache] | None = None,
                keys: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of every position; with `cache` (one LayerCache per layer, suite/models/common/generation.py) `idx`
        continues the cached positions, whose keys and values are reused, not recomputed. keys: (B, past + T) bool,
        False at left-padding positions, which no position attends to (rotary embeddings are relative, so a row's
        real tokens get the logits they would have unpadded)."""
        x = self.tok_embeddings(idx)
        past = cache[0].length if cache else 0
        cos, sin = self.rotary(past + idx.shape[1], x.dtype)
        cos, sin = cos[past:], sin[past:]
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache[i] if cache else None, keys)
        return self.output(self.norm(x))

    def aux_loss(self) -> torch.Tensor:
        """The last forward's load-balancing loss, summed over the MoE layers, unweighted (0 for a dense model)."""
        losses = [m.aux_loss for m in self.modules() if isinstance(m, MoE)]
        return torch.stack(losses).sum() if losses else torch.zeros(())


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    return Llama(cfg, vocab(cfg, meta))


# ---- parameters and FLOPs -------------------------------------------------------------------------------


def _attention_params(cfg: Config, biases: bool = True) -> int:
    """The attention's matmul parameters; with `biases`, its others too (biases, the q/k norms' weights)."""
    d, hd = cfg.d_model, cfg.head_size
    n = d * cfg.n_head * hd * 2 + d * cfg.kv_heads * hd * 2  # wq, wo; wk, wv
    if (cfg.attention_bias or cfg.qkv_bias) and biases:
        n += cfg.n_head * hd + 2 * cfg.kv_heads * hd + (d if cfg.attention_bias else 0)
    if cfg.qk_norm and biases:
        n += 2 * hd
    return n


def param_count(cfg: Config, meta: dict[str, Any]) -> int:
    """Every parameter (all experts), computed from the config: what memory holds."""
    d, v = cfg.d_model, vocab(cfg, meta)
    n = v * d * (1 if cfg.tie_embeddings else 2) + d  # embeddings, output, final norm
    for layer in range(cfg.n_layer):
        ffn = moe_total_params(d, cfg.moe) if cfg.is_moe(layer) and cfg.moe else swiglu_params(d, cfg.ffn_dim)
        n += _attention_params(cfg) + ffn + 2 * d
    return n


def active_matmul_params(cfg: Config, meta: dict[str, Any]) -> int:
    """N of 6N: the matmul parameters one token passes through. The input embedding is a lookup (tied or not,
    the output projection counts once); norms are element-wise; MoE layers count the router, the token's k
    experts and the shared experts, not the idle ones."""
    d = cfg.d_model
    n = vocab(cfg, meta) * d
    for layer in range(cfg.n_layer):
        ffn = moe_active_params(d, cfg.moe) if cfg.is_moe(layer) and cfg.moe else swiglu_params(d, cfg.ffn_dim)
        n += _attention_params(cfg, biases=False) + ffn
    return n


def attention_flops_per_token(cfg: Config) -> float:
    """12 * L * H * Q * T (PaLM; H the query heads, whatever the KV heads: GQA shares K and V, not the score
    and value products; causal masking not discounted, the repo's `full` convention)."""
    return 12.0 * cfg.n_layer * cfg.n_head * cfg.head_size * cfg.seq_len


def flops_per_token(cfg: Config, meta: dict[str, Any]) -> float:
    """6N + 12*L*H*Q*T per token, forward + backward, N the active matmul parameters (MFU for MoE counts
    active FLOPs)."""
    return 6.0 * active_matmul_params(cfg, meta) + attention_flops_per_token(cfg)


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    return flops_per_token(cfg, meta) * cfg.seq_len


def flops_by_class(cfg: Config, meta: dict[str, Any]) -> dict[str, float]:
    attention = attention_flops_per_token(cfg) * cfg.seq_len
    return {"matmul": flops_per_sample(cfg, meta) - attention, "attention": attention}


# ---- Hugging Face weight names ----------------------------------------------------------------------------

# Hugging Face parameter name (transformers 5: LlamaForCausalLM, MixtralForCausalLM, DeepseekV3ForCausalLM's MoE
# parts) -> this module's. Rotary weights need no permutation: both use rotate_half. Not covered: gpt-oss
# checkpoints (`mlp.router` with a bias, gate_up_proj (E, dim, 2*hidden) with gate and up interleaved, expert
# biases, attention sinks: parts this decoder does not have), DeepSeek-V3's MLA.
HF_TO_SUITE: list[tuple[str, str]] = [
    (r"model\.embed_tokens\.weight", "tok_embeddings.weight"),
    (r"model\.norm\.weight", "norm.weight"),
    (r"lm_head\.weight", "output.weight"),
    (r"model\.layers\.(\d+)\.input_layernorm\.weight", r"layers.\1.attention_norm.weight"),
    (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", r"layers.\1.ffn_norm.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.q_proj\.(weight|bias)", r"layers.\1.attention.wq.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.k_proj\.(weight|bias)", r"layers.\1.attention.wk.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.v_proj\.(weight|bias)", r"layers.\1.attention.wv.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj\.(weight|bias)", r"layers.\1.attention.wo.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.(q_norm|k_norm)\.weight", r"layers.\1.attention.\2.weight"),
    (r"model\.layers\.(\d+)\.mlp\.gate_proj\.weight", r"layers.\1.feed_forward.w1.weight"),
    (r"model\.layers\.(\d+)\.mlp\.up_proj\.weight", r"layers.\1.feed_forward.w3.weight"),
    (r"model\.layers\.(\d+)\.mlp\.down_proj\.weight", r"layers.\1.feed_forward.w2.weight"),
    (r"model\.layers\.(\d+)\.mlp\.gate\.weight", r"layers.\1.moe.router.weight"),
    (r"model\.layers\.(\d+)\.mlp\.gate\.e_score_correction_bias", r"layers.\1.moe.router.score_bias"),
    # stacked experts: gate_up_proj (E, 2*hidden, dim) is [w1; w3] along dim 1, split by from_hf_state_dict
    (r"model\.layers\.(\d+)\.mlp\.experts\.gate_up_proj", r"layers.\1.moe.experts.w1+w3"),
    (r"model\.layers\.(\d+)\.mlp\.experts\.down_proj", r"layers.\1.moe.experts.w2"),
    (r"model\.layers\.(\d+)\.mlp\.shared_experts\.gate_proj\.weight", r"layers.\1.moe.shared.w1.weight"),
    (r"model\.layers\.(\d+)\.mlp\.shared_experts\.up_proj\.weight", r"layers.\1.moe.shared.w3.weight"),
    (r"model\.layers\.(\d+)\.mlp\.shared_experts\.down_proj\.weight", r"layers.\1.moe.shared.w2.weight"),
]


def suite_name(hf_name: str) -> str:
    for pattern, target in HF_TO_SUITE:
        if re.fullmatch(pattern, hf_name):
            return re.sub(pattern, target, hf_name)
    raise KeyError(f"Hugging Face parameter {hf_name!r} has no counterpart in suite.models.llama.model (HF_TO_SUITE)")


def from_hf_state_dict(hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A Hugging Face state dict renamed (and stacked experts split) into this module's names."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in hf.items():
        if name.endswith("rotary_emb.inv_freq"):  # derived from the config, not a weight
            continue
        target = suite_name(name)
        if target.endswith("w1+w3"):
            prefix = target[: -len("w1+w3")]
            out[prefix + "w1"], out[prefix + "w3"] = tensor.chunk(2, dim=1)
        else:
            out[target] = tensor
    return out


_QKV = re.compile(r"(layers\.\d+\.attention\.)wqkv\.(weight|bias)")


def split_qkv(state: dict[str, torch.Tensor], cfg: Config) -> dict[str, torch.Tensor]:
    """A state dict with `fused_qkv`'s wqkv (rows [q; k; v]) as separate wq, wk, wv (views), in place of it; the
    rest as it is. The layout transformers' LlamaForCausalLM and the backends that read wq/wk/wv take."""
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if m := _QKV.fullmatch(name):
            for proj, part in zip(("wq", "wk", "wv"), t.split(list(cfg.qkv_sizes), dim=0), strict=True):
                out[f"{m[1]}{proj}.{m[2]}"] = part
        else:
            out[name] = t
    return out


def fuse_qkv(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The other way: each layer's wq, wk, wv concatenated into wqkv (rows [q; k; v]), where wq stood."""
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        m = re.fullmatch(r"(layers\.\d+\.attention\.)w([qkv])\.(weight|bias)", name)
        if m is None:
            out[name] = t
        elif m[2] == "q":
            out[f"{m[1]}wqkv.{m[3]}"] = torch.cat([state[f"{m[1]}w{x}.{m[3]}"] for x in "qkv"])
    return out


COMPONENT = Component(Config, build=build, flops_per_sample=flops_per_sample, flops_per_token=flops_per_token,
                      param_count=param_count, flops_by_class=flops_by_class,
                      active_matmul_params=active_matmul_params)

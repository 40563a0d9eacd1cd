"""A GPT (nanoGPT layout): token + learned position embeddings, pre-LN blocks, causal SDPA, tied LM head.

The same declarative config builds the smoke-tier char model (1-2 layers) and GPT-2 124M (12 x 768, 12
heads, 1024 context, vocab 50304); the Megatron backend builds its GPTModel from this same Config.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.gpt.config import Config
from suite.registry import Component


def vocab(cfg: Config, meta: dict[str, Any]) -> int:
    v = cfg.vocab_size or meta.get("vocab_size")
    if not v:
        raise ValueError("model.vocab_size is not set and the data set does not declare one")
    return int(v)


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        d = cfg.d_model
        self.n_head = cfg.n_head
        self.head_dim = d // cfg.n_head
        self.ln_1 = nn.LayerNorm(d, bias=cfg.bias)
        self.qkv = nn.Linear(d, 3 * d, bias=cfg.bias)
        self.proj = nn.Linear(d, d, bias=cfg.bias)
        self.ln_2 = nn.LayerNorm(d, bias=cfg.bias)
        self.fc = nn.Linear(d, cfg.mlp_ratio * d, bias=cfg.bias)
        self.fc_out = nn.Linear(cfg.mlp_ratio * d, d, bias=cfg.bias)
        self.dropout = cfg.dropout
        self.gelu = "tanh" if cfg.gelu == "tanh" else "none"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # heads are counted from the projection's width, so a tensor-parallel shard (n_head / tp heads, its
        # qkv rows grouped [Q_r; K_r; V_r] by suite/backends/parallel/tensor.py) runs this same code; the
        # sequence length too, as under sequence parallelism x holds a sequence shard and qkv all of it
        qkv = self.qkv(self.ln_1(x))
        b, t, _ = qkv.shape
        q, k, v = qkv.chunk(3, dim=2)
        q, k, v = (z.reshape(b, t, -1, self.head_dim).transpose(1, 2) for z in (q, k, v))
        drop = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=drop)
        x = x + F.dropout(self.proj(y.transpose(1, 2).reshape(b, t, -1)), drop, self.training)
        x = x + F.dropout(self.fc_out(F.gelu(self.fc(self.ln_2(x)), approximate=self.gelu)), drop, self.training)
        return x


class GPT(nn.Module):
    def __init__(self, cfg: Config, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.d_model, vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if name.endswith(("proj.weight", "fc_out.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    return GPT(cfg, vocab(cfg, meta))


def param_count(cfg: Config, meta: dict[str, Any], include_position: bool = False) -> int:
    """Parameters, computed from the config (not from a built model): N in PaLM's 6N."""
    d, v, L, r = cfg.d_model, vocab(cfg, meta), cfg.n_layer, cfg.mlp_ratio
    per_block = 3 * d * d + d * d + 2 * r * d * d  # qkv, proj, fc, fc_out
    per_block += 2 * d  # two LayerNorm weights
    if cfg.bias:
        per_block += 3 * d + d + r * d + d + 2 * d
    n = L * per_block + v * d + d * (1 + int(cfg.bias))  # blocks, wte, ln_f
    if not cfg.tie_embeddings:
        n += v * d
    if include_position:
        n += cfg.seq_len * d
    return n


def flops_per_token(cfg: Config, meta: dict[str, Any]) -> float:
    """PaLM (Chowdhery et al. 2022, appendix B): 6N + 12*L*H*Q*T per token, forward + backward.

    N excludes the position embeddings (a lookup, no matmul); the tied embedding counts once, as the LM
    head's matmul. An untied input embedding is a lookup too, so its v*d parameters are left out of N
    (counting them overstates a small untied model's FLOPs by several percent). The attention term is
    12 * n_layer * n_head * head_dim * seq_len (causal masking is not discounted, following PaLM and nanoGPT).
    """
    n = param_count(cfg, meta)
    if not cfg.tie_embeddings:
        n -= vocab(cfg, meta) * cfg.d_model
    head_dim = cfg.d_model // cfg.n_head
    return 6 * n + 12 * cfg.n_layer * cfg.n_head * head_dim * cfg.seq_len


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    return flops_per_token(cfg, meta) * cfg.seq_len


def flops_by_class(cfg: Config, meta: dict[str, Any]) -> dict[str, float]:
    """flops_per_sample split: attention score/value products (12*L*H*Q*T per token, the full convention)
    and every other matmul (6N)."""
    attention = 12.0 * cfg.n_layer * cfg.n_head * (cfg.d_model // cfg.n_head) * cfg.seq_len * cfg.seq_len
    return {"matmul": flops_per_sample(cfg, meta) - attention, "attention": attention}


COMPONENT = Component(Config, build=build, flops_per_sample=flops_per_sample, flops_per_token=flops_per_token,
                      param_count=param_count, flops_by_class=flops_by_class)

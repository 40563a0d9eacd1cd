"""HSTU (Zhai et al. 2024, "Actions Speak Louder than Words"), the encoder of MLPerf dlrmv4, as the reference
(mlcommons/training recommendation_v4/, a fork of meta-recsys/generative-recommenders) builds it: every layer
normalises, projects to U, V, Q, K through one SiLU-activated linear, attends with SiLU(QK^T / sqrt(d_qk)) / N (no
softmax; N the maximum sequence length) under a causal mask, normalises the attended values, gates them with U and
adds a linear projection back to the residual stream.

The sequence is the user's contextual token (user id), the history (item + action embeddings through the
preprocessor MLP, plus a learned position), then the candidates: each candidate attends to the context, the history
and itself (the reference's target-aware mask), and its encoding with the candidate's item embedding gives the logit.
Presets from the reference's `dlrm_v3/configs.py` (`get_hstu_configs`): `full`; `cpu` and `tiny` are ours.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from suite.models.recsys.tables import EmbeddingTables, TableSpec
from suite.registry import Component

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"embedding_dim": 8, "d_model": 8, "num_heads": 1, "linear_dim": 8, "qk_dim": 8, "num_layers": 1,
             "preprocessor_hidden": 16, "input_dropout": 0.0, "linear_dropout": 0.0},
    "cpu": {"embedding_dim": 64, "d_model": 64, "num_heads": 2, "linear_dim": 32, "qk_dim": 32, "num_layers": 2,
            "preprocessor_hidden": 128, "input_dropout": 0.2, "linear_dropout": 0.1},
    # configs.py get_hstu_configs: hstu_num_heads=4, hstu_attn_linear_dim=128, hstu_attn_qk_dim=128,
    # hstu_attn_num_layers=5, hstu_embedding_table_dim=512 (HSTU_EMBEDDING_DIM), hstu_preprocessor_hidden_dim=256,
    # hstu_transducer_embedding_dim=512, hstu_input_dropout_ratio=0.2, hstu_linear_dropout_rate=0.1
    "full": {"embedding_dim": 512, "d_model": 512, "num_heads": 4, "linear_dim": 128, "qk_dim": 128, "num_layers": 5,
             "preprocessor_hidden": 256, "input_dropout": 0.2, "linear_dropout": 0.1},
}
UNKNOWN_ACTION = 6  # the candidate's action (its rating is the label): one past the readers' ratings 1-5


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    preset: Literal["tiny", "cpu", "full"] | None = Field(default=None, description="sizes; a field set wins")
    embedding_dim: int = Field(gt=0)
    d_model: int = Field(gt=0, description="the transducer's width (hstu_transducer_embedding_dim)")
    num_heads: int = Field(gt=0)
    linear_dim: int = Field(gt=0, description="per-head width of U and V (hstu_attn_linear_dim)")
    qk_dim: int = Field(gt=0, description="per-head width of Q and K (hstu_attn_qk_dim)")
    num_layers: int = Field(gt=0)
    preprocessor_hidden: int = Field(gt=0)
    input_dropout: float = Field(default=0.0, ge=0, lt=1)
    linear_dropout: float = Field(default=0.0, ge=0, lt=1)

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") in PRESETS:
            return {**PRESETS[data["preset"]], **data}
        return data


class STULayer(nn.Module):
    """One HSTU layer over a padded batch [B, T, d] with a multiplicative mask [B or 1, T, T]."""

    def __init__(self, d: int, heads: int, linear_dim: int, qk_dim: int, max_len: int, dropout: float):
        super().__init__()
        self.heads, self.dl, self.dqk, self.max_len = heads, linear_dim, qk_dim, max_len
        self.input_norm = nn.LayerNorm(d)
        self.uvqk = nn.Linear(d, heads * (2 * linear_dim + 2 * qk_dim))
        self.output_norm = nn.LayerNorm(heads * linear_dim)
        self.output = nn.Linear(heads * linear_dim, d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h, dl, dqk = self.heads, self.dl, self.dqk
        u, v, q, k = F.silu(self.uvqk(self.input_norm(x))).split([h * dl, h * dl, h * dqk, h * dqk], dim=-1)
        q = q.reshape(b, t, h, dqk).transpose(1, 2)
        k = k.reshape(b, t, h, dqk).transpose(1, 2)
        v = v.reshape(b, t, h, dl).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(dqk))
        attn = F.silu(scores) / self.max_len * mask.unsqueeze(1)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, h * dl)
        return x + self.output(self.dropout(self.output_norm(out) * u))


class HSTU(nn.Module):
    def __init__(self, cfg: Config, tables: list[TableSpec], max_history: int):
        super().__init__()
        self.cfg, self.max_history = cfg, max_history
        e, d = cfg.embedding_dim, cfg.d_model
        self.tables = EmbeddingTables(tables)
        self.context = nn.Linear(e, d)  # the contextual feature (user id) as one token
        self.pre_in = nn.Linear(2 * e, cfg.preprocessor_hidden)  # item + action embeddings
        self.pre_out = nn.Linear(cfg.preprocessor_hidden, d)
        self.position = nn.Parameter(torch.randn(max_history + 2, d) * 0.02)  # context, history, the candidate slot
        self.input_dropout = nn.Dropout(cfg.input_dropout)
        self.layers = nn.ModuleList(
            STULayer(d, cfg.num_heads, cfg.linear_dim, cfg.qk_dim, max_history + 2, cfg.linear_dropout)
            for _ in range(cfg.num_layers))
        self.final_norm = nn.LayerNorm(d)
        self.item_proj = nn.Linear(e, d)
        self.head_hidden = nn.Linear(3 * d, d)
        self.head_out = nn.Linear(d, 1)

    def _tokens(self, items: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        emb = torch.cat([self.tables.lookup("item", items), self.tables.lookup("rating", actions)], dim=-1)
        return self.pre_out(F.silu(self.pre_in(emb)))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits [B] for one candidate per sample (batch["cand_item"] [B]), [B, C] for C ([B, C])."""
        hist, cand = batch["hist_item"], batch["cand_item"]
        one = cand.dim() == 1
        cand = cand.unsqueeze(1) if one else cand
        b, n_hist = hist.shape
        c = cand.shape[1]
        ctx = self.context(self.tables.lookup("user", batch["user"])).unsqueeze(1)
        hist_tok = self._tokens(hist, batch["hist_rating"])
        cand_tok = self._tokens(cand, torch.full_like(cand, UNKNOWN_ACTION))
        pos = self.position
        x = torch.cat([ctx + pos[0], hist_tok + pos[1 : n_hist + 1], cand_tok + pos[n_hist + 1]], dim=1)
        x = self.input_dropout(x)
        mask = self.mask(hist > 0, c)
        for layer in self.layers:
            x = layer(x, mask)
        enc = self.final_norm(x[:, n_hist + 1 :])
        item = self.item_proj(self.tables.lookup("item", cand))
        hidden = F.silu(self.head_hidden(torch.cat([enc, item, enc * item], dim=-1)))
        logits = self.head_out(hidden).squeeze(-1)
        return logits.squeeze(1) if one else logits

    @staticmethod
    def mask(valid_hist: torch.Tensor, n_cand: int) -> torch.Tensor:
        """[B, T, T]: the context and history attend causally to valid positions; each candidate attends to the
        context, the valid history and itself, never to another candidate."""
        b, n_hist = valid_hist.shape
        t = n_hist + 1 + n_cand
        keys = torch.cat([torch.ones(b, 1, dtype=torch.bool, device=valid_hist.device), valid_hist,
                          torch.zeros(b, n_cand, dtype=torch.bool, device=valid_hist.device)], dim=1)
        causal = torch.ones(t, t, dtype=torch.bool, device=valid_hist.device).tril()
        m = causal.unsqueeze(0) & keys.unsqueeze(1)
        idx = torch.arange(n_hist + 1, t, device=valid_hist.device)
        m[:, idx, idx] = True  # a candidate sees itself
        return m.float()


def table_specs(cfg: Config, meta: dict[str, Any]) -> list[TableSpec]:
    card = meta["cardinality"]
    return [TableSpec(name, int(card[name]), cfg.embedding_dim) for name in ("user", "item", "rating")]


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    return HSTU(cfg, table_specs(cfg, meta), int(meta["max_history"]))


def forward_flops(cfg: Config, max_history: int, n_cand: int = 1) -> float:
    """Matmul FLOPs of one sample's forward: the full T x T attention is computed (the mask multiplies it)."""
    e, d, h = cfg.embedding_dim, cfg.d_model, cfg.num_heads
    t = max_history + 1 + n_cand
    tokens = max_history + n_cand
    pre = tokens * (2 * 2 * e * cfg.preprocessor_hidden + 2 * cfg.preprocessor_hidden * d) + 2 * e * d
    per_layer = (t * 2 * d * h * (2 * cfg.linear_dim + 2 * cfg.qk_dim)  # uvqk
                 + 2 * t * t * h * cfg.qk_dim + 2 * t * t * h * cfg.linear_dim  # QK^T and AV
                 + t * 2 * h * cfg.linear_dim * d)  # output projection
    head = n_cand * (2 * e * d + 2 * 3 * d * d + 2 * d)
    return float(pre + cfg.num_layers * per_layer + head)


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    """Forward + backward = 3x forward: every matmul's inputs require gradients (the first ones read embedding
    rows, which train), so backward costs two matmuls per forward one."""
    return 3.0 * forward_flops(cfg, int(meta["max_history"]))


def flops_by_class(cfg: Config, meta: dict[str, Any]) -> dict[str, float]:
    return {"matmul": flops_per_sample(cfg, meta)}


def bytes_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    """Embedding bytes one training sample moves (fp32): rows read forward, the same rows' gradients written and
    read back by the optimizer's update (read + write of the row and its state) - the figure the reference's step is
    bound by. Per sample: 1 user row, max_history + 1 item and action rows, and the candidate's item row again."""
    rows = 1 + 2 * (int(meta["max_history"]) + 1) + 1
    return float(rows * cfg.embedding_dim * 4 * 4)  # read, gradient write, optimizer read + write


COMPONENT = Component(Config, build=build, flops_per_sample=flops_per_sample, flops_by_class=flops_by_class,
                      bytes_per_sample=bytes_per_sample)

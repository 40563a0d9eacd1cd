"""HSTU (Zhai et al. 2024, "Actions Speak Louder than Words"), the encoder of MLPerf dlrmv4, as the reference
(mlcommons/training recommendation_v4/, a fork of meta-recsys/generative-recommenders) builds it. Each layer is the
reference's STULayer on its PyTorch path: layer norm (eps 1e-6), one projection to U, V, Q, K (bias, no SiLU but on
U), SiLU(QK^T / sqrt(d_qk)) / N attention (no softmax; N the maximum sequence length) under a causal, target-aware
mask, then x + [U, AV, U * LayerNorm(AV)] @ W_out (no output bias). Sources, read 2026-12-07:
- generative_recommenders/modules/stu.py (meta-recsys, commit 1cf745902c487c9582bf6b9723384ae335514271),
  STULayer.__init__ / forward: xavier_uniform_ uvqk and output weights [d, 2H(l+qk)] and [3Hl, d], zero uvqk bias,
  norm_eps=1e-6 both norms, concat_u=True, concat_x=True, mul_u_activation_type="none";
- ops/hstu_compute.py (19bc4e07fc950909eac2ec60f588ad6465f8f868) hstu_compute_uqvk: `u = F.silu(u)`, q, k, v raw;
- ops/pytorch/pt_hstu_linear.py (32b8e675555fc899d45bf2792dd959cc344241b2) pytorch_norm_mul_dropout: dropout over
  the concatenation [u, attn, u * LayerNorm(attn)], then `torch.addmm(x, y, output_weight)`;
- ops/pytorch/pt_hstu_attention.py (3a6085c67dbdf3f12c61694b2e7e37bb170d1d81) _get_valid_attn_mask;
- mlcommons/training recommendation_v4/generative_recommenders/modules/dlrm_hstu.py (commits 17e04af320676b25b5625
  2d1a5ee2fa5d13c8e76 and d489c7c8050c7cd552a75606a968cff9e1e23420) builds every STULayerConfig with causal=True,
  target_aware=True, max_attn_len=None, attn_alpha=None and contextual_seq_len=0: dlrmv4's contextual tokens are
  ordinary causal tokens in the STU (the layer's contextual mode, where they see every non-target token, is unused).
Checked on the same weights against the reference's PyTorch path restated in tests/support/gr_stu_layer.py
(tests/models/test_hstu_reference_layer.py).

The sequence is the user's contextual token (user id; Yambda: and the crosses), each through its own linear map, the
history (the reference's ContextualPreprocessor: content MLP of the item row + additional MLP of its side rows +
action MLP of the action row: suite/models/recsys/hstu_blocks.py), then the candidates: each candidate attends to the context, the history and
itself (the reference's target-aware mask). The whole sequence goes through the reference's HSTUPositionalEncoder
(hstu_blocks.py: scaled by sqrt(d), plus a position counted from the end of the history and a bucket of the time between the
query and each event; the events' times are the batch's `hist_time`, the query time `query_time`). A contextual
token's input is zeroed where the sequence (history + candidates) is shorter than its min_uih_length (the meta's
`contextual_min_uih_length`: configs.py's 20 for MovieLens' user, 0 for Yambda). The attention is divided by the
batch's longest sequence (contextual tokens + the longest valid history + candidates), as the reference's transducer passes max_seq_len = max_uih_len +
max_targets + contextual length with max_uih_len = fx_infer_max_len(lengths) = int(lengths.max()) (dlrm_hstu.py
`preprocess`; preprocessors.py, mlcommons/training commit 461b0f47fc921abc595971e1f8c597d85e0918af; common.py,
meta-recsys commit af61dcce8cd5bfa96b50d54dfd3bda140dc07dbe).

From the candidate's encoding to the logit, as dlrm_hstu.py (mlcommons/training d489c7c8050c7cd552a75606a968cff9e1e23420)
builds it: its default TimestampLayerNormPostprocessor (hstu_blocks.py: hour of day and day of week of the query time), the
item MLP (`_item_embedding_mlp`: Linear(item features, 512), SwishLayerNorm, Linear(512, d), LayerNorm) over the candidate's
concatenated item features, and the multitask module's prediction module (Linear(d, 512), SwishLayerNorm, Linear(512,
tasks); one task) on user * item (multitask_module.py _compute_pred_and_logits, meta-recsys commit
ac829b415eca2796571a9d0836069f634ce1c302); both MLPs initialised by init_mlp_weights_optional_bias; SwishLayerNorm is
x * sigmoid(LayerNorm(x)) (ops/layer_norm.py 18fdc3d36ef79f8213b7621cfc911b8c3592bc7a, ops/pytorch/pt_layer_norm.py
6035c3f9b2512791b0983e0adc71749b2a22e7dc). Checked on the same weights against those pieces restated in
tests/support/gr_dlrm_head.py (tests/models/test_hstu_reference_model.py); the positional encoder, the postprocessor
and the min_uih_length masking against tests/support/gr_positional.py (tests/models/test_hstu_reference_encoder.py).
The MLPs' hidden width is `mlp_hidden`
(512 in `full`; the reference's literal).
Presets from the reference's `dlrm_v3/configs.py` (`get_hstu_configs`, mlcommons/training commit
c2342c5d992680c8ae1b458e6470bf02b448e584): `full`; `cpu` and `tiny` are ours.

Yambda (dlrmv4) adds what the reference's yambda-5b config adds: each item's artist and album tables beside the item
table (through the preprocessor's additional MLP into each token, and concatenated into the candidate's item
features for the item MLP; `meta["item_side"]`), and seven
hashed cross features as contextual tokens after the user's (`meta["contextual"]`): the reference's 11 tables (user,
item, artist, album, 7 crosses; actions go through the ActionEncoder, no table), its action bits [1, 2, 4]
(`meta["action_weights"]`). Without those keys in the meta (MovieLens) the model has the user and item tables and
reads each history rating r as the bit 2^(r-1), as the reference's movie_lens.py.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.recsys.hstu_blocks import (
    ContextualPreprocessor,
    HSTUPositionalEncoder,
    TimestampLayerNormPostprocessor,
    mlp,
)
from suite.models.recsys.hstu_config import Config
from suite.models.recsys.tables import EmbeddingTables, TableSpec
from suite.registry import Component

# configs.py (movielens): action_weights [1, 2, 4, 8, 16], one bit per rating 1-5 (movie_lens.py: action_weights[
# rating - 1]); Yambda's readers give the bitmask itself, its action_weights [1, 2, 4] in meta["action_weights"]
RATING_ACTION_WEIGHTS = (1, 2, 4, 8, 16)


class STULayer(nn.Module):
    """One HSTU layer over a padded batch [B, T, d] with a multiplicative mask [B or 1, T, T]; parameters in the
    reference's layout (uvqk_weight [d, 2H(l+qk)], output_weight [3Hl, d]) and initialised as it does."""

    NORM_EPS = 1e-6  # stu.py: norm_eps=1e-6 for the input and the output norm

    def __init__(self, d: int, heads: int, linear_dim: int, qk_dim: int, max_len: int, dropout: float):
        super().__init__()
        self.heads, self.dl, self.dqk, self.max_len = heads, linear_dim, qk_dim, max_len
        self.input_norm = nn.LayerNorm(d, eps=self.NORM_EPS)
        self.uvqk_weight = nn.Parameter(torch.empty(d, heads * (2 * linear_dim + 2 * qk_dim)))
        nn.init.xavier_uniform_(self.uvqk_weight)
        self.uvqk_beta = nn.Parameter(torch.zeros(heads * (2 * linear_dim + 2 * qk_dim)))
        self.output_weight = nn.Parameter(torch.empty(3 * heads * linear_dim, d))
        nn.init.xavier_uniform_(self.output_weight)
        self.output_norm = nn.LayerNorm(heads * linear_dim, eps=self.NORM_EPS)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, max_seq_len: int | None = None) -> torch.Tensor:
        """`max_seq_len` divides the attention: the batch's longest sequence in the reference (dlrm_hstu.py's
        fx_infer_max_len over the lengths, plus candidates and contextual tokens); default the padded length."""
        b, t, _ = x.shape
        h, dl, dqk = self.heads, self.dl, self.dqk
        uvqk = torch.matmul(self.input_norm(x), self.uvqk_weight) + self.uvqk_beta
        u, v, q, k = uvqk.split([h * dl, h * dl, h * dqk, h * dqk], dim=-1)
        u = F.silu(u)  # u only (hstu_compute_uqvk)
        q = q.reshape(b, t, h, dqk).transpose(1, 2)
        k = k.reshape(b, t, h, dqk).transpose(1, 2)
        v = v.reshape(b, t, h, dl).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(dqk))
        attn = F.silu(scores) / (max_seq_len or self.max_len) * mask.unsqueeze(1)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, h * dl)
        y = torch.cat([u, out, u * self.output_norm(out)], dim=-1)  # concat_u, concat_x
        return x + torch.matmul(self.dropout(y), self.output_weight)


class HSTU(nn.Module):
    def __init__(self, cfg: Config, tables: list[TableSpec], max_history: int, item_side: tuple[str, ...] = (),
                 contextual: tuple[str, ...] = (), action_weights: tuple[int, ...] = RATING_ACTION_WEIGHTS,
                 actions_are_ratings: bool = True, min_uih_length: tuple[int, ...] | None = None):
        super().__init__()
        self.cfg, self.max_history = cfg, max_history
        self.item_side, self.contextual = tuple(item_side), tuple(contextual)
        e, d = cfg.embedding_dim, cfg.d_model
        n_ctx, n_item = 1 + len(self.contextual), 1 + len(self.item_side)
        # per contextual slot (user, then the crosses): the slot's input is zeroed where the sequence (history +
        # candidates) is shorter (preprocessors.py get_contextual_input_embeddings; 0: never)
        self.min_uih_length = tuple(min_uih_length) if min_uih_length is not None else (0,) * n_ctx
        if len(self.min_uih_length) != n_ctx:
            raise ValueError(f"min_uih_length: {len(self.min_uih_length)} values for {n_ctx} contextual slots")
        self.tables = EmbeddingTables(tables)
        self.pre = ContextualPreprocessor(e, cfg.preprocessor_hidden, d, n_ctx, n_item - 1, tuple(action_weights))
        self.actions_are_ratings = actions_are_ratings
        # dlrm_hstu.py's order: preprocessor, positional encoder, postprocessor, the STU layers
        self.positional = HSTUPositionalEncoder(cfg.num_position_buckets, cfg.num_time_buckets, d)
        self.post = TimestampLayerNormPostprocessor(d)
        self.input_dropout = nn.Dropout(cfg.input_dropout)
        self.layers = nn.ModuleList(
            STULayer(d, cfg.num_heads, cfg.linear_dim, cfg.qk_dim, n_ctx + max_history + 1, cfg.linear_dropout)
            for _ in range(cfg.num_layers))
        self.item_mlp = mlp(n_item * e, cfg.mlp_hidden, d, out_norm=True)  # _item_embedding_mlp
        self.head = mlp(d, cfg.mlp_hidden, 1, out_norm=False)  # the multitask module's prediction_fn, one task

    def _item(self, items: torch.Tensor, side: list[torch.Tensor]) -> torch.Tensor:
        """The item's features: its row, then its side tables' rows (artist, album), concatenated."""
        rows = [self.tables.lookup("item", items)] + [self.tables.lookup(n, s) for n, s in zip(self.item_side, side,
                                                                                                strict=True)]
        return torch.cat(rows, dim=-1) if side else rows[0]

    def _tokens(self, items: torch.Tensor, actions: torch.Tensor | None, side: list[torch.Tensor]) -> torch.Tensor:
        """Tokens of history events (`actions` [B, N]: ratings or action bitmasks, 0 padding) or of candidates
        (`actions` None: the ActionEncoder's target vector)."""
        side_rows = [self.tables.lookup(n, s) for n, s in zip(self.item_side, side, strict=True)]
        if actions is not None and self.actions_are_ratings:  # movie_lens.py: action_weights[rating - 1]
            actions = torch.where(actions > 0, torch.ones_like(actions) << (actions - 1).clamp(min=0), 0)
        return self.pre(self.tables.lookup("item", items), torch.cat(side_rows, dim=-1) if side_rows else None,
                        actions)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits [B] for one candidate per sample (batch["cand_item"] [B]), [B, C] for C ([B, C]). The events'
        times: batch["hist_time"] [B, N] (integer seconds, 0 padding) and the query time batch["query_time"] [B]
        (the readers' last history event, as the reference's datasets set item_query_time)."""
        hist, cand = batch["hist_item"], batch["cand_item"]
        one = cand.dim() == 1
        cand = cand.unsqueeze(1) if one else cand
        b, n_hist = hist.shape
        c = cand.shape[1]
        valid = hist > 0
        ctx_rows = torch.stack([self.tables.lookup("user", batch["user"])] +
                               [self.tables.lookup(n, batch[f"ctx:{n}"]) for n in self.contextual], dim=1)
        if any(self.min_uih_length):  # seq_lengths there: history + candidates
            seq_len = valid.sum(dim=1, keepdim=True) + c
            keep = seq_len >= torch.tensor(self.min_uih_length, device=seq_len.device)
            ctx_rows = ctx_rows * keep.unsqueeze(-1).to(ctx_rows.dtype)
        ctx = self.pre.context(ctx_rows)  # [B, n_ctx, d]
        n_ctx = ctx.shape[1]
        cand_side = [batch[f"cand_{n}"] for n in self.item_side]
        cand_side = [s.unsqueeze(1) for s in cand_side] if one else cand_side
        hist_tok = self._tokens(hist, batch["hist_rating"], [batch[f"hist_{n}"] for n in self.item_side])
        cand_tok = self._tokens(cand, None, cand_side)
        x = torch.cat([ctx, hist_tok, cand_tok], dim=1)
        query_time = batch["query_time"]
        x = self.input_dropout(self.positional(x, n_ctx, c, query_time, batch["hist_time"]))
        mask = self.mask(valid, c, n_ctx)
        longest = n_ctx + int(valid.sum(dim=1).max()) + c  # the reference's max_seq_len: this batch's longest
        for layer in self.layers:
            x = layer(x, mask, longest)
        enc = self.post(x[:, n_ctx + n_hist :], query_time.unsqueeze(1).expand(b, c))
        item = self.item_mlp(self._item(cand, cand_side))
        logits = self.head(enc * item).squeeze(-1)  # _compute_pred_and_logits: prediction_module(user * item)
        return logits.squeeze(1) if one else logits

    @staticmethod
    def mask(valid_hist: torch.Tensor, n_cand: int, n_ctx: int = 1) -> torch.Tensor:
        """[B, T, T]: the context and history attend causally to valid positions; each candidate attends to the
        context, the valid history and itself, never to another candidate: the reference's _get_valid_attn_mask with
        causal=True, target-aware, contextual_seq_len=0 (as dlrm_hstu.py builds every STULayer)."""
        b, n_hist = valid_hist.shape
        t = n_ctx + n_hist + n_cand
        keys = torch.cat([torch.ones(b, n_ctx, dtype=torch.bool, device=valid_hist.device), valid_hist,
                          torch.zeros(b, n_cand, dtype=torch.bool, device=valid_hist.device)], dim=1)
        causal = torch.ones(t, t, dtype=torch.bool, device=valid_hist.device).tril()
        m = causal.unsqueeze(0) & keys.unsqueeze(1)
        idx = torch.arange(n_ctx + n_hist, t, device=valid_hist.device)
        m[:, idx, idx] = True  # a candidate sees itself
        return m.float()


def table_specs(cfg: Config, meta: dict[str, Any]) -> list[TableSpec]:
    card = meta["cardinality"]
    names = ("user", "item", *meta.get("item_side", ()), *meta.get("contextual", ()))  # actions: the ActionEncoder
    return [TableSpec(name, int(card[name]), cfg.embedding_dim) for name in names]


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    contextual = tuple(meta.get("contextual", ()))
    min_uih = meta.get("contextual_min_uih_length", {})  # configs.py contextual_feature_to_min_uih_length
    return HSTU(cfg, table_specs(cfg, meta), int(meta["max_history"]), tuple(meta.get("item_side", ())),
                contextual, *_actions(meta), min_uih_length=tuple(int(min_uih.get(n, 0)) for n in ("user",
                                                                                                    *contextual)))


def _actions(meta: dict[str, Any]) -> tuple[tuple[int, ...], bool]:
    """(action_weights, whether the history's actions are ratings 1-5 rather than bitmasks)."""
    weights = meta.get("action_weights")
    return (tuple(weights), False) if weights else (RATING_ACTION_WEIGHTS, True)


def forward_flops(cfg: Config, max_history: int, n_cand: int = 1, n_side: int = 0, n_ctx: int = 1,
                  n_actions: int = len(RATING_ACTION_WEIGHTS)) -> float:
    """Matmul FLOPs of one sample's forward: the full T x T attention is computed (the mask multiplies it)."""
    e, d, h = cfg.embedding_dim, cfg.d_model, cfg.num_heads
    t = n_ctx + max_history + n_cand
    tokens = max_history + n_cand
    ph = cfg.preprocessor_hidden
    mlps = 2 + (1 if n_side else 0)  # content, action (+ additional) MLPs: Linear(in, ph), Linear(ph, d)
    a = ContextualPreprocessor.ACTION_DIM * n_actions
    pre = tokens * (2 * (1 + n_side) * e * ph + 2 * a * ph + mlps * 2 * ph * d) + n_ctx * 2 * e * d
    per_layer = (t * 2 * d * h * (2 * cfg.linear_dim + 2 * cfg.qk_dim)  # uvqk
                 + 2 * t * t * h * cfg.qk_dim + 2 * t * t * h * cfg.linear_dim  # QK^T and AV
                 + t * 2 * 3 * h * cfg.linear_dim * d)  # output projection of [u, attn, u * norm(attn)]
    hm = cfg.mlp_hidden
    post = 2 * (d + 2 * len(TimestampLayerNormPostprocessor.TIME_DURATION_FEATURES)) * d  # time feature combiner
    head = n_cand * (post + 2 * (1 + n_side) * e * hm + 2 * hm * d  # item MLP
                     + 2 * d * hm + 2 * hm)  # prediction module on user * item
    return float(pre + cfg.num_layers * per_layer + head)


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    """Forward + backward = 3x forward: every matmul's inputs require gradients (the first ones read embedding
    rows, which train), so backward costs two matmuls per forward one."""
    return 3.0 * forward_flops(cfg, int(meta["max_history"]), 1, len(meta.get("item_side", ())),
                               1 + len(meta.get("contextual", ())), len(_actions(meta)[0]))


def flops_by_class(cfg: Config, meta: dict[str, Any]) -> dict[str, float]:
    return {"matmul": flops_per_sample(cfg, meta)}


def bytes_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    """Embedding bytes one training sample moves (fp32): rows read forward, the same rows' gradients written and
    read back by the optimizer's update (read + write of the row and its state) - the figure the reference's step is
    bound by. Per sample: the contextual rows (user, crosses), max_history + 1 item (+ side) rows, and the
    candidate's item (+ side) rows again (actions are the model's ActionEncoder, no table)."""
    n_side = len(meta.get("item_side", ()))
    rows = 1 + len(meta.get("contextual", ())) + (1 + n_side) * (int(meta["max_history"]) + 1) + 1 + n_side
    return float(rows * cfg.embedding_dim * 4 * 4)  # read, gradient write, optimizer read + write


COMPONENT = Component(Config, build=build, flops_per_sample=flops_per_sample, flops_by_class=flops_by_class,
                      bytes_per_sample=bytes_per_sample)

"""The reference's modules around MLPerf dlrmv4's STU layers (mlcommons/training recommendation_v4/, a fork of
meta-recsys/generative-recommenders), as suite/models/recsys/hstu.py's HSTU uses them: SwishLayerNorm and the MLPs of
dlrm_hstu.py, the ContextualPreprocessor with its ActionEncoder, the HSTUPositionalEncoder and the
TimestampLayerNormPostprocessor. Each is checked against the reference's piece restated in plain torch
(tests/support/gr_dlrm_head.py, tests/support/gr_positional.py) by tests/models/test_hstu_reference_model.py and
tests/models/test_hstu_reference_encoder.py."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class SwishLayerNorm(nn.Module):
    """x * sigmoid(LayerNorm(x)), eps 1e-5: the reference's SwishLayerNorm (ops/layer_norm.py, PyTorch path
    ops/pytorch/pt_layer_norm.py pytorch_swish_layer_norm)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))  # its parameters and their names
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps))


def init_mlp(m: nn.Module) -> None:
    """common.py init_mlp_weights_optional_bias: xavier-uniform weights, zero biases (Linear layers only)."""
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        if m.bias is not None:
            nn.init.zeros_(m.bias)


def mlp(d_in: int, hidden: int, d_out: int, out_norm: bool) -> nn.Sequential:
    """dlrm_hstu.py's two MLPs: Linear(d_in, hidden), SwishLayerNorm(hidden), Linear(hidden, d_out), then LayerNorm(
    d_out) for the item MLP (`_item_embedding_mlp`), none for the multitask prediction module (`prediction_fn`);
    `.apply(init_mlp_weights_optional_bias)` as there."""
    layers = [nn.Linear(d_in, hidden), SwishLayerNorm(hidden), nn.Linear(hidden, d_out)]
    return nn.Sequential(*layers, *([nn.LayerNorm(d_out)] if out_norm else [])).apply(init_mlp)


class ContextualPreprocessor(nn.Module):
    """The reference's ContextualPreprocessor (preprocessors.py, mlcommons/training commit
    461b0f47fc921abc595971e1f8c597d85e0918af): each contextual token through its own linear map (batched weights
    [n_ctx, e, d] drawn normal(0, sqrt(2 / (e + d))), zero biases: `_batched_contextual_linear_*`); each sequence token
    = content MLP(item row) + additional MLP(the item's side rows, concatenated; Yambda's artist and album) + action
    MLP(ActionEncoder output), each MLP Linear, SwishLayerNorm, Linear, LayerNorm. The ActionEncoder
    (modules/action_encoder.py, meta-recsys commit d65b6c414ecaa21567cb34956deea1f99de9e100): a history event's action
    bitmask exploded against `action_weights` (bit k set -> row k of an [n_types, 8] table, else zeros), flattened to
    8 * n_types; a candidate gets one learned [1, 8 * n_types] vector; both drawn normal(0, 0.1)
    (action_embedding_init_std). Then HSTUTransducer.__init__ (hstu_transducer.py,
    d489c7c8050c7cd552a75606a968cff9e1e23420) re-draws every Linear weight outside the STU xavier-normal."""

    ACTION_DIM = 8  # dlrm_hstu.py: action_embedding_dim=8

    def __init__(self, e: int, hidden: int, d: int, n_ctx: int, n_side: int, action_weights: tuple[int, ...]):
        super().__init__()
        std = math.sqrt(2.0 / (e + d))
        self.ctx_weight = nn.Parameter(torch.empty(n_ctx, e, d).normal_(0.0, std))
        self.ctx_bias = nn.Parameter(torch.zeros(n_ctx, d))
        self.content = mlp(e, hidden, d, out_norm=True)
        self.additional = mlp(n_side * e, hidden, d, out_norm=True) if n_side else None
        n_types = len(action_weights)
        self.register_buffer("action_weights", torch.tensor(action_weights), persistent=False)
        self.action_table = nn.Parameter(torch.empty(n_types, self.ACTION_DIM).normal_(0.0, 0.1))
        self.target_action = nn.Parameter(torch.empty(1, n_types * self.ACTION_DIM).normal_(0.0, 0.1))
        self.action = mlp(n_types * self.ACTION_DIM, hidden, d, out_norm=True)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)

    def context(self, rows: torch.Tensor) -> torch.Tensor:
        """[B, n_ctx, e] -> [B, n_ctx, d]: the reference's baddbmm over the contextual slots."""
        return torch.baddbmm(self.ctx_bias.unsqueeze(1), rows.transpose(0, 1), self.ctx_weight).transpose(0, 1)

    def action_embeddings(self, bits: torch.Tensor | None, shape: tuple[int, ...]) -> torch.Tensor:
        """ActionEncoder.forward: [..., 8 * n_types] for history bitmasks `bits`, the target vector when None."""
        if bits is None:
            return self.target_action.expand(*shape, -1)
        exploded = (bits.unsqueeze(-1) & self.action_weights) > 0
        return (exploded.unsqueeze(-1) * self.action_table).flatten(-2)

    def forward(self, item: torch.Tensor, side: torch.Tensor | None, bits: torch.Tensor | None) -> torch.Tensor:
        out = self.content(item) + self.action(self.action_embeddings(bits, item.shape[:-1]))
        return out + self.additional(side) if self.additional is not None else out


class HSTUPositionalEncoder(nn.Module):
    """The reference's HSTUPositionalEncoder (modules/positional_encoder.py) on the path its ops/position.py
    add_timestamp_positional_embeddings takes (ops/pytorch/pt_position.py, mlcommons/training commit
    461b0f47fc921abc595971e1f8c597d85e0918af): every token scaled by sqrt(d), plus a position embedding counted from
    the end of the history (contextual tokens 0..n_ctx-1, the last history event n_ctx + 1, the first n_ctx + L, each
    candidate n_ctx; clamped to the last bucket) and a timestamp embedding of bucket int(sqrt(max(query time - event
    time, 1e-6) / 60)) clamped to [0, num_time_buckets] (time_bucket_fn "sqrt", its default: the encoder passes none;
    the contextual tokens' time is 0, the candidates' the query time). The clamp's upper end is the table's last row
    (num_time_buckets), as the Triton kernel the reference trains with reads it (triton_position.py:
    `num_time_buckets=ts_emb_size - 1`, the rows); the PyTorch path reads `ts_embeddings.size(1) - 1`, the width.
    Both tables drawn uniform(-sqrt(1 / buckets), sqrt(1 / buckets)), position first."""

    TIME_BUCKET_INCREMENTS = 60.0  # pt_position.py: time_bucket_increments

    def __init__(self, num_position_buckets: int, num_time_buckets: int, d: int):
        super().__init__()
        self.num_time_buckets, self.alpha = num_time_buckets, d**0.5
        bound_p, bound_t = math.sqrt(1.0 / num_position_buckets), math.sqrt(1.0 / num_time_buckets)
        self.position_weight = nn.Parameter(torch.empty(num_position_buckets, d).uniform_(-bound_p, bound_p))
        self.timestamp_weight = nn.Parameter(torch.empty(num_time_buckets + 1, d).uniform_(-bound_t, bound_t))

    def positions(self, n_ctx: int, n_hist: int, n_cand: int, device: torch.device) -> torch.Tensor:
        """[T] position buckets of the padded layout [context, history left-padded to n_hist, candidates]: history
        column k -> n_ctx + n_hist - k whatever the history's length (pt_position.py _get_col_indices)."""
        ctx = torch.arange(n_ctx, device=device)
        hist = n_ctx + n_hist - torch.arange(n_hist, device=device)
        cand = torch.full((n_cand,), n_ctx, device=device, dtype=torch.long)
        return torch.cat([ctx, hist, cand]).clamp(max=self.position_weight.shape[0] - 1)

    def buckets(self, query_time: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
        """[B, T] time buckets of the events at `times` [B, T] (integer seconds) for the queries [B]: pt_position.py's
        ops on the integer difference (clamp(min=1e-6) promotes it to float32, as there)."""
        ts = (query_time.unsqueeze(1) - times).clamp(min=1e-6) / self.TIME_BUCKET_INCREMENTS
        ts = torch.sqrt(ts).clamp(min=0).int()
        return torch.clamp(ts, min=0, max=self.num_time_buckets).long()

    def forward(self, x: torch.Tensor, n_ctx: int, n_cand: int, query_time: torch.Tensor,
                hist_time: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        n_hist = t - n_ctx - n_cand
        times = torch.cat([torch.zeros(b, n_ctx, dtype=hist_time.dtype, device=x.device), hist_time,
                           query_time.unsqueeze(1).expand(b, n_cand)], dim=1)
        pos = self.position_weight[self.positions(n_ctx, n_hist, n_cand, x.device)]
        return x * self.alpha + (self.timestamp_weight[self.buckets(query_time, times)] + pos).to(x.dtype)


class TimestampLayerNormPostprocessor(nn.Module):
    """The reference's TimestampLayerNormPostprocessor (modules/postprocessors.py, mlcommons/training commit
    d489c7c8050c7cd552a75606a968cff9e1e23420) with dlrm_hstu.py's time_duration_features [(3600, 24), (86400, 7)]:
    the candidate's encoding concatenated with cos and sin of 2 * 3.14 * (hour of day / 24, day of week / 7) of its
    query time (computed in float32, the query time read as float32, as there), through Linear(d + 4, d)
    (init_mlp_weights_optional_bias, then the transducer's xavier-normal re-draw), then LayerNorm(eps 1e-5)."""

    TIME_DURATION_FEATURES = ((60 * 60, 24), (24 * 60 * 60, 7))  # hour of day, day of week

    def __init__(self, d: int):
        super().__init__()
        feats = self.TIME_DURATION_FEATURES  # constants, not buffers: a cast of the model (bf16) must not round them
        self.combiner = nn.Linear(d + 2 * len(feats), d).apply(init_mlp)
        nn.init.xavier_normal_(self.combiner.weight)  # HSTUTransducer.__init__ re-draws every Linear outside the STU
        self.norm = nn.LayerNorm(d, eps=1e-5)

    def time_features(self, query_time: torch.Tensor) -> torch.Tensor:
        """[..., 4]: (cos, sin) of each period's phase, float32."""
        period_units = torch.tensor([float(f[0]) for f in self.TIME_DURATION_FEATURES], device=query_time.device)
        units_per_period = torch.tensor([float(f[1]) for f in self.TIME_DURATION_FEATURES], device=query_time.device)
        units = torch.div(query_time.unsqueeze(-1).float(), period_units, rounding_mode="floor")
        phase = torch.remainder(units, units_per_period) / units_per_period * 2 * 3.14
        return torch.view_as_real(torch.polar(torch.ones_like(phase), phase)).flatten(-2, -1)

    def forward(self, x: torch.Tensor, query_time: torch.Tensor) -> torch.Tensor:
        feats = self.time_features(query_time).to(x.dtype)
        return self.norm(self.combiner(torch.cat([x, feats], dim=-1).to(self.combiner.weight.dtype)))

"""MLPerf dlrmv4's positional encoder and timestamp postprocessor, as its reference builds them, restated in plain
torch on the reference's jagged layout. Sources, read 2026-12-07 (mlcommons/training recommendation_v4/
generative_recommenders, commit a67b8459467c551c08f8566d68a8e4e1659e6bd7; the files last changed in 461b0f47fc921abc5
95971e1f8c597d85e0918af and d489c7c8050c7cd552a75606a968cff9e1e23420):

- modules/positional_encoder.py HSTUPositionalEncoder: `_position_embeddings_weight` [num_position_buckets, d] drawn
  uniform(+-sqrt(1 / num_position_buckets)), then `_timestamp_embeddings_weight` [num_time_buckets + 1, d] drawn
  uniform(+-sqrt(1 / num_time_buckets)); forward calls add_timestamp_positional_embeddings with alpha = d ** 0.5,
  max_contextual_seq_len = the contextual length, interleave_targets False, time_bucket_fn left at "sqrt";
- ops/position.py add_timestamp_positional_embeddings: seq_embeddings * alpha, then the kernel;
- ops/pytorch/pt_position.py: _get_col_indices (positions counted from the end of the history, the candidates at
  the history's end, + the contextual length, clamped to the last bucket, the contextual tokens 0..n-1) and
  pytorch_add_timestamp_positional_embeddings (query time = the sequence's last timestamp; ts = (query - t).clamp(
  min=1e-6) / 60, sqrt, .int(), clamped to [0, num_time_buckets]; padded + (time + position));
  `num_time_buckets` there reads `ts_embeddings.size(1) - 1` (the width), where the Triton kernel the reference
  trains with reads `ts_emb_size - 1` = shape[0] - 1 (ops/triton/triton_position.py): `clamp_rows` picks the
  Triton reading (the default; the model's) or the PyTorch path's literal;
- modules/preprocessors.py ContextualPreprocessor.forward: the contextual tokens come first with timestamp 0, and
  get_contextual_input_embeddings zeroes a contextual feature's input where seq_lengths (history + candidates) is
  below its min_uih_length;
- modules/dlrm_hstu.py: HSTUPositionalEncoder(num_position_buckets=8192, num_time_buckets=2048, ...); the
  TimestampLayerNormPostprocessor with time_duration_features [(3600, 24), (86400, 7)], eps 1e-5;
- modules/postprocessors.py TimestampLayerNormPostprocessor: floor(t / period_units) mod units_per_period, / units,
  * 2 * 3.14, torch.polar(1, .) in float32, view_as_real flattened (cos, sin per feature), concatenated after the
  embedding, `_time_feature_combiner` Linear(d + 4, d), then LayerNorm;
- modules/hstu_transducer.py _postprocess: the postprocessor on the candidates' embeddings and timestamps only.

The keyword knobs (`clamp_rows`, `alpha`, `from_end`, `features`) are for the negative controls, not the
reference's: its values are the defaults."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def col_indices(max_seq_len: int, max_contextual_seq_len: int, max_pos_ind: int, seq_lengths: torch.Tensor,
                num_targets: torch.Tensor, from_end: bool = True) -> torch.Tensor:
    """pt_position.py _get_col_indices (interleave_targets False). `from_end=False` (a control): counted from the
    start of the sequence."""
    b = seq_lengths.size(0)
    col = torch.arange(max_seq_len).expand(b, max_seq_len)
    high = seq_lengths - num_targets
    if from_end:
        col = torch.clamp(col, max=high.view(-1, 1))
        col = high.view(-1, 1) - col
    col = col + max_contextual_seq_len
    col = torch.clamp(col, max=max_pos_ind - 1)
    if max_contextual_seq_len > 0:
        col[:, :max_contextual_seq_len] = torch.arange(0, max_contextual_seq_len).view(1, -1)
    return col


def add_timestamp_positional_embeddings(seq_embeddings: torch.Tensor, seq_offsets: torch.Tensor,
                                        pos_embeddings: torch.Tensor, ts_embeddings: torch.Tensor,
                                        timestamps: torch.Tensor, max_seq_len: int, max_contextual_seq_len: int,
                                        seq_lengths: torch.Tensor, num_targets: torch.Tensor,
                                        clamp_rows: bool = True, alpha: float | None = None,
                                        from_end: bool = True) -> torch.Tensor:
    """ops/position.py then pt_position.py on jagged [sum(L), d] embeddings and [sum(L)] integer timestamps."""
    seq_embeddings = seq_embeddings * (pos_embeddings.shape[1] ** 0.5 if alpha is None else alpha)
    pos_inds = col_indices(max_seq_len, max_contextual_seq_len, pos_embeddings.size(0), seq_lengths, num_targets,
                           from_end)
    b = pos_inds.shape[0]
    num_time_buckets = (ts_embeddings.size(0) if clamp_rows else ts_embeddings.size(1)) - 1
    padded_ts = torch.zeros(b, max_seq_len, dtype=timestamps.dtype)
    padded_emb = torch.zeros(b, max_seq_len, seq_embeddings.shape[1], dtype=seq_embeddings.dtype)
    for i in range(b):
        s, e = int(seq_offsets[i]), int(seq_offsets[i + 1])
        padded_ts[i, : e - s], padded_emb[i, : e - s] = timestamps[s:e], seq_embeddings[s:e]
    query_time = torch.gather(padded_ts, dim=1, index=(seq_lengths - 1).unsqueeze(1).clamp(min=0))
    ts = query_time - padded_ts
    ts = ts.clamp(min=1e-6) / 60.0
    ts = torch.sqrt(ts)
    ts = (ts / 1.0).clamp(min=0).int()
    ts = torch.clamp(ts, min=0, max=num_time_buckets)
    position_embeddings = torch.index_select(pos_embeddings, 0, pos_inds.reshape(-1)).view(b, max_seq_len, -1)
    time_embeddings = torch.index_select(ts_embeddings, 0, ts.reshape(-1).long()).view(b, max_seq_len, -1)
    summed = padded_emb + (time_embeddings + position_embeddings).to(seq_embeddings.dtype)
    return torch.cat([summed[i, : int(seq_lengths[i])] for i in range(b)])


def contextual_inputs(rows: torch.Tensor, seq_lengths: torch.Tensor, min_uih_length: list[int]) -> torch.Tensor:
    """get_contextual_input_embeddings for one-row contextual features [B, n_ctx, e]: feature k times
    (seq_lengths >= min_uih_length[k]) where that is > 0."""
    out = []
    for k, m in enumerate(min_uih_length):
        v = rows[:, k]
        if m > 0:
            v = v * (seq_lengths.view(-1, 1) >= m)
        out.append(v)
    return torch.stack(out, dim=1)


def time_features(timestamps: torch.Tensor, dtype: torch.dtype,
                  features: tuple[tuple[int, int], ...] = ((3600, 24), (86400, 7))) -> torch.Tensor:
    """TimestampLayerNormPostprocessor._concat_time_features' time part for [L] timestamps -> [L, 2 * n]."""
    period_units = torch.tensor([float(f[0]) for f in features]).view(1, -1)
    units_per_period = torch.tensor([float(f[1]) for f in features]).view(1, -1).float()
    units_since_epoch = torch.div(timestamps.unsqueeze(-1).float(), period_units.float(), rounding_mode="floor")
    elapsed = (torch.remainder(units_since_epoch, units_per_period) / units_per_period) * 2 * 3.14
    elapsed = torch.view_as_real(torch.polar(torch.ones_like(elapsed).float(), elapsed.float())).flatten(-2, -1)
    return elapsed.to(dtype)


def timestamp_layer_norm_postprocessor(seq_embeddings: torch.Tensor, timestamps: torch.Tensor,
                                       w: dict[str, torch.Tensor], **kw) -> torch.Tensor:
    """TimestampLayerNormPostprocessor.forward: LayerNorm(combiner(cat([x, time features])))."""
    x = torch.cat([seq_embeddings, time_features(timestamps, seq_embeddings.dtype, **kw)], dim=-1)
    x = F.linear(x, w["combiner.weight"], w["combiner.bias"])
    return F.layer_norm(x, (x.shape[-1],), w["norm.weight"], w["norm.bias"], 1e-5)

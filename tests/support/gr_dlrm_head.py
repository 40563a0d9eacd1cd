"""The model around MLPerf dlrmv4's STU layers, as its reference builds it, restated in plain torch: the item MLP,
the multitask prediction module and the candidate's output path. Sources, read 2026-12-07:

- mlcommons/training recommendation_v4/generative_recommenders/modules/dlrm_hstu.py (commit
  d489c7c8050c7cd552a75606a968cff9e1e23420): DlrmHSTU.__init__ builds `_item_embedding_mlp` = Sequential(Linear(
  table_dim * len(item_embedding_feature_names), 512), SwishLayerNorm(512), Linear(512, transducer_dim),
  LayerNorm(transducer_dim)).apply(init_mlp_weights_optional_bias) and the DefaultMultitaskModule's prediction_fn =
  Sequential(Linear(in_dim, 512), SwishLayerNorm(512), Linear(512, num_tasks)).apply(init_mlp_weights_optional_bias);
  `_item_forward` concatenates the candidate's item features along the last dimension; every STULayerConfig gets
  `max_seq_len` from the transducer, which is the batch's longest sequence: `preprocess` takes max_uih_len =
  fx_infer_max_len(uih lengths) and max_num_candidates = fx_infer_max_len(num_candidates), and the preprocessor adds
  the contextual tokens (preprocessors.py, commit 461b0f47fc921abc595971e1f8c597d85e0918af, ContextualPreprocessor:
  output_max_seq_len = max_uih_len + max_targets + max_contextual_seq_len);
- meta-recsys/generative-recommenders generative_recommenders/common.py (commit
  af61dcce8cd5bfa96b50d54dfd3bda140dc07dbe): fx_infer_max_len = int(lengths.max()); init_mlp_weights_optional_bias =
  xavier_uniform_ on each Linear's weight, its bias filled with 0;
- ops/layer_norm.py (18fdc3d36ef79f8213b7621cfc911b8c3592bc7a): SwishLayerNorm and LayerNorm, eps 1e-5, weight ones,
  bias zeros; ops/pytorch/pt_layer_norm.py (6035c3f9b2512791b0983e0adc71749b2a22e7dc) pytorch_swish_layer_norm:
  x * sigmoid(layer_norm(x)) (in float32, then back: a no-op for a float32 model, left out so float64 is exact);
- modules/multitask_module.py (ac829b415eca2796571a9d0836069f634ce1c302) _compute_pred_and_logits:
  prediction_module(encoded_user_embeddings * item_embeddings).transpose(0, 1), sigmoid for a binary task;
- modules/postprocessors.py (mlcommons/training, d489c7c8050c7cd552a75606a968cff9e1e23420) LayerNormPostprocessor:
  LayerNorm(eps 1e-5) on the candidate's encoding (the reference's `use_layer_norm_postprocessor=True` option; its
  default, TimestampLayerNormPostprocessor, needs the candidate's query time, which our batches do not carry).

- modules/preprocessors.py (mlcommons/training, 461b0f47fc921abc595971e1f8c597d85e0918af) ContextualPreprocessor:
  `_batched_contextual_linear_weights` [n_ctx, e, d] (normal, std sqrt(2 / (e + d))) and `_bias` [n_ctx, d] (zeros)
  applied by torch.baddbmm over the contextual slots; `_content_embedding_mlp` on the item row, plus
  `_additional_embedding_mlp` on the concatenated additional features (the item's side rows), plus
  `_action_embedding_mlp` on the ActionEncoder's output; each MLP Linear, SwishLayerNorm, Linear, LayerNorm;
- modules/action_encoder.py (meta-recsys, d65b6c414ecaa21567cb34956deea1f99de9e100) ActionEncoder.forward:
  exploded = (seq_actions.unsqueeze(-1) & action_weights.unsqueeze(0)) > 0, (exploded.unsqueeze(-1) *
  action_embedding_table.unsqueeze(0)).view(-1, n_types * dim) for the history, `_target_action_embedding_table`
  tiled for the candidates; dlrm_v3/datasets/movie_lens.py (mlcommons/training ddcbdb4f2f273495ad69841e7a6eaa42a1e93661):
  a history rating r becomes action_weights[r - 1] (configs.py movielens: [1, 2, 4, 8, 16]).

The keyword knobs (`item_out_norm`, `swish`, `head_input`, `shared_context`, `use_side`) are for the negative controls in
tests/models/test_hstu_reference_model.py, not the reference's: its values are the defaults."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def swish_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return x * torch.sigmoid(F.layer_norm(x, (x.shape[-1],), weight, bias, eps))


def _mlp(x: torch.Tensor, w: dict[str, torch.Tensor], swish: bool) -> torch.Tensor:
    """Sequential(Linear, SwishLayerNorm, Linear, ...) by its state_dict keys "0.*", "1.*", "2.*"."""
    h = F.linear(x, w["0.weight"], w["0.bias"])
    h = swish_layer_norm(h, w["1.weight"], w["1.bias"]) if swish else F.silu(h)
    return F.linear(h, w["2.weight"], w["2.bias"])


def item_embedding_mlp(item_features: torch.Tensor, w: dict[str, torch.Tensor], item_out_norm: bool = True,
                       swish: bool = True) -> torch.Tensor:
    out = _mlp(item_features, w, swish)
    return F.layer_norm(out, (out.shape[-1],), w["3.weight"], w["3.bias"], 1e-5) if item_out_norm else out


def prediction_logits(user: torch.Tensor, item: torch.Tensor, w: dict[str, torch.Tensor], swish: bool = True,
                      head_input: str = "product") -> torch.Tensor:
    """[num_tasks, L] logits: prediction_module(user * item).transpose(0, 1)."""
    x = user * item if head_input == "product" else user
    return _mlp(x, w, swish).transpose(0, 1)


def reference_mlp(d_in: int, hidden: int, d_out: int, out_norm: bool) -> dict[str, torch.Tensor]:
    """The parameters dlrm_hstu.py's Sequential gets from the global generator: each Linear built (its own init
    draws), then .apply(init_mlp_weights_optional_bias) re-draws the weights xavier-uniform and zeroes the biases."""
    first, second = torch.nn.Linear(d_in, hidden), torch.nn.Linear(hidden, d_out)
    for lin in (first, second):  # apply() visits the children in order
        torch.nn.init.xavier_uniform_(lin.weight)
        lin.bias.data.fill_(0.0)
    w = {"0.weight": first.weight, "0.bias": first.bias, "1.weight": torch.ones(hidden),
         "1.bias": torch.zeros(hidden), "2.weight": second.weight, "2.bias": second.bias}
    if out_norm:
        w.update({"3.weight": torch.ones(d_out), "3.bias": torch.zeros(d_out)})
    return {k: v.detach() for k, v in w.items()}


def contextual_embeddings(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                          shared_context: bool = False) -> torch.Tensor:
    """[B, n_ctx, e] -> [B, n_ctx, d]: baddbmm(bias.view(-1, 1, d), x.view(-1, n_ctx, e).transpose(0, 1), weights)
    .transpose(0, 1), as ContextualPreprocessor.forward. `shared_context` (a control): slot 0's map for every slot."""
    n_ctx = rows.shape[1]
    if shared_context:
        weight, bias = weight[:1].expand(n_ctx, -1, -1), bias[:1].expand(n_ctx, -1)
    return torch.baddbmm(bias.view(n_ctx, 1, -1), rows.transpose(0, 1), weight).transpose(0, 1)


def _mlp_ln(x: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
    return item_embedding_mlp(x, w)  # the same Linear, SwishLayerNorm, Linear, LayerNorm


def sequence_embeddings(item: torch.Tensor, side: torch.Tensor | None, action: torch.Tensor,
                        w_content: dict[str, torch.Tensor], w_additional: dict[str, torch.Tensor] | None,
                        w_action: dict[str, torch.Tensor], use_side: bool = True) -> torch.Tensor:
    """content MLP(item) + additional MLP(side) + action MLP(action), ContextualPreprocessor.forward's sum."""
    out = _mlp_ln(item, w_content)
    if side is not None and use_side:
        out = out + _mlp_ln(side, w_additional)
    return out + _mlp_ln(action, w_action)


def action_embeddings(actions: torch.Tensor, weights: list[int], table: torch.Tensor) -> torch.Tensor:
    """ActionEncoder.forward on history events (jagged [L] bitmasks) -> [L, n_types * dim]."""
    exploded = torch.bitwise_and(actions.unsqueeze(-1), torch.tensor(weights).unsqueeze(0)) > 0
    return (exploded.unsqueeze(-1) * table.unsqueeze(0)).view(-1, len(weights) * table.shape[1])


def rating_actions(ratings: torch.Tensor, weights: list[int]) -> torch.Tensor:
    """movie_lens.py: action_weights[int(rating) - 1] for each history rating."""
    return torch.tensor([weights[int(r) - 1] for r in ratings.reshape(-1)]).view(ratings.shape)

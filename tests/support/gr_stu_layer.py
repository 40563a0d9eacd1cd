"""The HSTU layer of MLPerf dlrmv4's reference, its PyTorch path (HammerKernel.PYTORCH), restated here on jagged
inputs: one STULayer.forward of meta-recsys/generative-recommenders, the repository mlcommons/training's
recommendation_v4/generative_recommenders forks (its own copies of these files are not in the store this was
written from; the upstream ones are):

- modules/stu.py (commit 1cf745902c487c9582bf6b9723384ae335514271), STULayer.forward: preprocess-and-attention
  then compute-output, norm eps 1e-6, alpha 1/sqrt(attention_dim), concat_u=True, concat_x=True,
  mul_u_activation_type="none", group_norm False;
- ops/hstu_compute.py (19bc4e07fc950909eac2ec60f588ad6465f8f868), hstu_compute_uqvk: layer norm, addmm with the
  bias, split u, v, q, k, SiLU on u only;
- ops/pytorch/pt_hstu_attention.py (3a6085c67dbdf3f12c61694b2e7e37bb170d1d81), pytorch_hstu_mha and
  _get_valid_attn_mask: SiLU(alpha q k^T) / max_seq_len under the causal, target-aware, contextual mask;
- ops/pytorch/pt_hstu_linear.py (32b8e675555fc899d45bf2792dd959cc344241b2), pytorch_norm_mul_dropout and
  pytorch_hstu_compute_output: x + [u, attn, u * LayerNorm(attn)] @ output_weight.

The reference's own code cannot run here: pytorch_hstu_mha pads and unpads through torch.ops.fbgemm
(jagged_to_padded_dense, dense_to_jagged), and fbgemm-gpu-cpu 1.9.0 does not load beside torch 2.13
(docs/recommenders.md); ops/hstu_compute.py also imports generative_recommenders.common and the package's triton
kernels at module level. The padding below is those two ops' layout in plain torch (values [L, ...] by offsets
to [B, N, ...], zeros after each sequence, and back).

Its pytorch_norm_mul_dropout computes the gated norm in float32 (`x.to(torch.float32)`, then back): a no-op for the
float32 model, left out here so that the float64 comparison is exact.

`silu_qkv` is a knob for the negative controls in tests/models/test_hstu_reference_layer.py, not the reference's
(hstu_compute_uqvk activates u only: silu_qkv=False). `contextual_seq_len` is the STULayerConfig field, 0 in
dlrmv4: mlcommons/training recommendation_v4/generative_recommenders/modules/dlrm_hstu.py (commits
17e04af320676b25b56252d1a5ee2fa5d13c8e76, d489c7c8050c7cd552a75606a968cff9e1e23420) builds every STULayer with
contextual_seq_len=0.

`reference_init` is STULayer.__init__'s parameter initialisation (stu.py above), in its order."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def reference_init(d: int, num_heads: int, attention_dim: int, hidden_dim: int) -> dict[str, torch.Tensor]:
    """STULayer.__init__: xavier_uniform_ uvqk_weight [d, 2H(hidden+attention)], zero uvqk_beta, unit/zero input
    norm, xavier_uniform_ output_weight [3*H*hidden, d], unit/zero output norm (from the global generator)."""
    uvqk = torch.empty(d, (hidden_dim * 2 + attention_dim * 2) * num_heads)
    torch.nn.init.xavier_uniform_(uvqk)
    out = torch.empty(hidden_dim * num_heads * 3, d)
    torch.nn.init.xavier_uniform_(out)
    return {"uvqk_weight": uvqk, "uvqk_beta": torch.zeros(uvqk.shape[1]), "input_norm_weight": torch.ones(d),
            "input_norm_bias": torch.zeros(d), "output_weight": out,
            "output_norm_weight": torch.ones(hidden_dim * num_heads),
            "output_norm_bias": torch.zeros(hidden_dim * num_heads)}


def valid_attn_mask(n: int, seq_lengths: torch.Tensor, num_targets: torch.Tensor | None,
                    contextual_seq_len: int) -> torch.Tensor:
    """[B, N, N] bool: _get_valid_attn_mask with causal=True, max_attn_len=0, min_full_attn_seq_len=0. The
    contextual tokens share position 0 and see every non-target token; the targets share the position after the
    history, so each sees the context, the history and itself only."""
    ids = torch.arange(n).view(1, n)
    max_ids = seq_lengths.view(-1, 1, 1)
    if contextual_seq_len > 0:
        ids = torch.clamp(ids - contextual_seq_len + 1, min=0)
        max_ids = max_ids - contextual_seq_len + 1
    if num_targets is not None:
        max_ids = max_ids - num_targets.view(-1, 1, 1)
        ids = torch.minimum(ids, max_ids)
        rows, cols = ids.view(-1, n, 1).expand(-1, n, n), ids.view(-1, 1, n).expand(-1, n, n)
    else:
        rows = ids.view(n, 1).expand(n, n).view(1, n, n)
        cols = ids.view(1, n).expand(n, n).view(1, n, n)
    mask = torch.eye(n, dtype=torch.bool).view(1, n, n) | (rows - cols > 0)
    if contextual_seq_len > 0:
        mask = mask | ((rows == 0) & (cols < max_ids))
    return mask


def _pad(values: torch.Tensor, offsets: torch.Tensor, n: int) -> torch.Tensor:
    out = values.new_zeros(len(offsets) - 1, n, *values.shape[1:])
    for b in range(len(offsets) - 1):
        s, e = int(offsets[b]), int(offsets[b + 1])
        out[b, : e - s] = values[s:e]
    return out


def _unpad(dense: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return torch.cat([dense[b, : int(offsets[b + 1] - offsets[b])] for b in range(len(offsets) - 1)])


def stu_layer(x: torch.Tensor, offsets: torch.Tensor, max_seq_len: int, num_targets: torch.Tensor,
              contextual_seq_len: int, w: dict[str, torch.Tensor], num_heads: int, attention_dim: int,
              hidden_dim: int, eps: float = 1e-6, silu_qkv: bool = False) -> torch.Tensor:
    """One STULayer.forward in eval mode (dropout off) on jagged x [L, d]. `w` holds the reference's parameters:
    input_norm_weight/_bias [d], uvqk_weight [d, 2H(hidden+attention)], uvqk_beta, output_norm_weight/_bias
    [H*hidden], output_weight [3*H*hidden, d]."""
    h, a, v_dim = num_heads, attention_dim, hidden_dim
    normed = F.layer_norm(x, (x.shape[-1],), w["input_norm_weight"], w["input_norm_bias"], eps)
    uvqk = torch.addmm(w["uvqk_beta"], normed, w["uvqk_weight"])
    u, v, q, k = torch.split(uvqk, [v_dim * h, v_dim * h, a * h, a * h], dim=1)
    u = F.silu(u)
    if silu_qkv:
        q, k, v = F.silu(q), F.silu(k), F.silu(v)
    q, k, v = (_pad(t.reshape(-1, h, d), offsets, max_seq_len).transpose(1, 2)
               for t, d in ((q, a), (k, a), (v, v_dim)))  # [B, H, N, d]
    qk = F.silu(torch.einsum("bhxa,bhya->bhxy", q, k) * (1.0 / a**0.5)) / max_seq_len
    mask = valid_attn_mask(max_seq_len, offsets[1:] - offsets[:-1], num_targets, contextual_seq_len)
    attn = torch.einsum("bhxd,bhdv->bhxv", qk * mask.unsqueeze(1), v)  # [B, H, N, hidden]
    attn = _unpad(attn.transpose(1, 2).flatten(2, 3), offsets)  # [L, H*hidden]
    y = u * F.layer_norm(attn, (attn.shape[-1],), w["output_norm_weight"], w["output_norm_bias"], eps)
    y = torch.cat([u, attn, y], dim=1)
    return torch.addmm(x, y, w["output_weight"])

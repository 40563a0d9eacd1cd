"""suite/models/recsys/hstu.py's STULayer against the reference's HSTU layer (MLPerf dlrmv4's STULayer, its PyTorch
path, restated in tests/support/gr_stu_layer.py with its sources) on the same weights: equal (float64, 1e-10) on every
row, the contextual tokens' included, with the reference's own settings (eps 1e-6, SiLU on u only, the output
projection of [u, attn, u * LayerNorm(attn)] without bias, contextual_seq_len=0 as dlrm_hstu.py builds it).

Negative controls: each of the five differences the layer used to have, put back alone, breaks the match:
1. SiLU on q, k and v as well as u;  2. layer-norm eps 1e-5;  3. the output projection reading u * LayerNorm(attn)
only (its u and attn blocks zero);  4. an output bias;  5. the STU's contextual mode (contextual_seq_len = the
number of contextual tokens: they then see every non-target token), which dlrmv4 does not use; and one changed
weight. Full-length histories only: ours pads the history in place, the reference packs each sequence (jagged)."""

from __future__ import annotations

import pytest
import torch
from support.gr_stu_layer import reference_init, stu_layer, valid_attn_mask

from suite.models.recsys.hstu import HSTU, STULayer

B, N_CTX, N_HIST, N_CAND = 3, 2, 5, 2
N = N_CTX + N_HIST + N_CAND
D, HEADS, LIN, QK = 8, 2, 4, 3


def _pair(seed: int = 0):
    torch.manual_seed(seed)
    ours = STULayer(D, HEADS, LIN, QK, N, dropout=0.0).double().eval()
    with torch.no_grad():
        for p in ours.parameters():  # LayerNorm's ones and zeros too, so a transposed or swapped weight shows
            p.copy_(torch.randn_like(p) * 0.5)
    return ours, _weights(ours)


def _weights(ours: STULayer) -> dict[str, torch.Tensor]:
    w = {"input_norm_weight": ours.input_norm.weight, "input_norm_bias": ours.input_norm.bias,
         "uvqk_weight": ours.uvqk_weight, "uvqk_beta": ours.uvqk_beta, "output_norm_weight": ours.output_norm.weight,
         "output_norm_bias": ours.output_norm.bias, "output_weight": ours.output_weight}
    return {k: v.detach().clone() for k, v in w.items()}  # copies: a weight changed in ours changes only ours


def _both(ours: STULayer, w: dict, **ref_kw) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    x = torch.randn(B, N, D, dtype=torch.float64)
    mask = HSTU.mask(torch.ones(B, N_HIST, dtype=torch.bool), N_CAND, N_CTX).double()
    with torch.no_grad():
        mine = ours(x, mask)
        kw = {"contextual_seq_len": 0, **ref_kw}
        ctx = kw.pop("contextual_seq_len")
        ref = stu_layer(x.reshape(B * N, D), torch.arange(B + 1) * N, N, torch.full((B,), N_CAND), ctx, w,
                        HEADS, QK, LIN, **kw).reshape(B, N, D)
    return mine, ref


def test_ours_equals_the_reference():
    ours, w = _pair()
    mine, ref = _both(ours, w)
    torch.testing.assert_close(mine, ref, rtol=0, atol=1e-10)
    assert ref.abs().max() > 0.1  # not a comparison of near-zero outputs


def test_ours_initialises_as_the_reference():
    """Same generator state, same parameters: STULayer.__init__'s xavier_uniform_ draws in its order and layout."""
    torch.manual_seed(5)
    ours = STULayer(D, HEADS, LIN, QK, N, dropout=0.0)
    torch.manual_seed(5)
    ref = reference_init(D, HEADS, QK, LIN)
    for name, value in _weights(ours).items():
        assert torch.equal(value, ref[name]), name


@pytest.mark.parametrize("change", ["one weight", "silu on q k v", "eps 1e-5", "output reads u*norm only",
                                    "output bias", "contextual mode"])
def test_one_difference_put_back_breaks_the_match(change):
    ours, w = _pair()
    kw: dict = {}
    rows = slice(None)
    with torch.no_grad():
        if change == "one weight":
            ours.uvqk_weight[3, LIN * HEADS + 1] += 0.01  # a v weight
        elif change == "silu on q k v":  # 1
            kw["silu_qkv"] = True
        elif change == "eps 1e-5":  # 2
            ours.input_norm.eps = ours.output_norm.eps = 1e-5
        elif change == "output reads u*norm only":  # 3
            ours.output_weight[: 2 * HEADS * LIN] = 0.0
        elif change == "output bias":  # 4
            bias = torch.full((D,), 0.01, dtype=torch.float64)
            ours.register_forward_hook(lambda _m, _i, out: out + bias)
        else:  # 5: only the context rows depend on it within one layer
            kw["contextual_seq_len"] = N_CTX
            rows = slice(0, N_CTX)
    mine, ref = _both(ours, w, **kw)
    assert (mine[:, rows] - ref[:, rows]).abs().max() > 1e-8


def test_the_masks_are_the_references():
    """The target-aware mask, contextual_seq_len=0 (dlrmv4): equal on every row; the STU's contextual mode differs
    on the context rows only (there they see the whole history)."""
    ours = HSTU.mask(torch.ones(1, N_HIST, dtype=torch.bool), N_CAND, N_CTX)[0].bool()
    assert torch.equal(ours, valid_attn_mask(N, torch.tensor([N]), torch.tensor([N_CAND]), 0)[0])
    contextual = valid_attn_mask(N, torch.tensor([N]), torch.tensor([N_CAND]), N_CTX)[0]
    assert torch.equal(ours[N_CTX:], contextual[N_CTX:])
    assert contextual[:N_CTX, : N_CTX + N_HIST].all() and not ours[:N_CTX, N_CTX:].any()

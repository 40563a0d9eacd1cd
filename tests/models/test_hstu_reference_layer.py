"""suite/models/recsys/hstu.py's STULayer against the reference's HSTU layer (MLPerf dlrmv4's STULayer, its PyTorch
path, restated in tests/support/gr_stu_layer.py with its sources) on the same weights.

They are not the same layer. Ours equals the reference's exactly (float64, 1e-10) once five things are set as ours
has them, each of which this test shows matters (reverting it alone breaks the match):
1. SiLU on q, k and v as well as u (the reference activates u only: hstu_compute_uqvk);
2. layer-norm eps 1e-5 (torch's default; the reference's 1e-6);
3. the output projection reads u * LayerNorm(attn) only (the reference's reads [u, attn, u * LayerNorm(attn)]:
   concat_u=True, concat_x=True, output_weight [3*H*hidden, d]); here its u and attn blocks are zero;
4. no output bias (ours has one; it is zeroed here);
5. the contextual tokens: in the reference they see every non-target token (the mask's `row_ids == 0` term); ours
   are causal. The outputs of the history and candidate rows do not depend on it within one layer, so those rows
   are compared; the context rows differ, shown below.
Full-length histories only: ours pads the history in place, the reference packs each sequence (jagged)."""

from __future__ import annotations

import pytest
import torch
from support.gr_stu_layer import stu_layer, valid_attn_mask

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
        ours.output.bias.zero_()  # 4
    return ours, _weights(ours)


def _weights(ours: STULayer) -> dict[str, torch.Tensor]:
    hl = HEADS * LIN
    out = torch.zeros(3 * hl, D, dtype=torch.float64)
    out[2 * hl :] = ours.output.weight.detach().T  # 3: only the u * LayerNorm(attn) block
    w = {"input_norm_weight": ours.input_norm.weight, "input_norm_bias": ours.input_norm.bias,
         "uvqk_weight": ours.uvqk.weight.T, "uvqk_beta": ours.uvqk.bias, "output_norm_weight": ours.output_norm.weight,
         "output_norm_bias": ours.output_norm.bias, "output_weight": out}
    return {k: v.detach().clone() for k, v in w.items()}  # copies: a weight changed in ours changes only ours


def _both(ours: STULayer, w: dict, **ref_kw) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    x = torch.randn(B, N, D, dtype=torch.float64)
    mask = HSTU.mask(torch.ones(B, N_HIST, dtype=torch.bool), N_CAND, N_CTX).double()
    with torch.no_grad():
        mine = ours(x, mask)
        kw = {"eps": 1e-5, "silu_qkv": True, **ref_kw}  # 1, 2
        ref = stu_layer(x.reshape(B * N, D), torch.arange(B + 1) * N, N, torch.full((B,), N_CAND), N_CTX, w,
                        HEADS, QK, LIN, **kw).reshape(B, N, D)
    return mine, ref


def test_ours_equals_the_reference_with_the_listed_differences():
    ours, w = _pair()
    mine, ref = _both(ours, w)
    torch.testing.assert_close(mine[:, N_CTX:], ref[:, N_CTX:], rtol=0, atol=1e-10)
    assert (mine[:, :N_CTX] - ref[:, :N_CTX]).abs().max() > 1e-3  # 5: the context rows


@pytest.mark.parametrize("change", ["one weight", "reference qkv", "reference eps", "reference output", "bias"])
def test_one_change_breaks_the_match(change):
    ours, w = _pair()
    kw = {}
    with torch.no_grad():
        if change == "one weight":
            ours.uvqk.weight[LIN * HEADS + 1, 3] += 0.01  # a v weight
        elif change == "reference qkv":
            kw["silu_qkv"] = False
        elif change == "reference eps":
            kw["eps"] = 1e-6
        elif change == "reference output":
            w["output_weight"][: 2 * HEADS * LIN] = torch.randn(2 * HEADS * LIN, D, dtype=torch.float64) * 0.5
        else:
            ours.output.bias.fill_(0.01)
    mine, ref = _both(ours, w, **kw)
    assert (mine[:, N_CTX:] - ref[:, N_CTX:]).abs().max() > 1e-8


def test_the_masks_agree_but_for_the_context_rows():
    """The target-aware mask: every history and candidate row as the reference's; a context row sees the whole
    history there and only the earlier context here."""
    ours = HSTU.mask(torch.ones(1, N_HIST, dtype=torch.bool), N_CAND, N_CTX)[0].bool()
    ref = valid_attn_mask(N, torch.tensor([N]), torch.tensor([N_CAND]), N_CTX)[0]
    assert torch.equal(ours[N_CTX:], ref[N_CTX:])
    assert ref[:N_CTX, : N_CTX + N_HIST].all() and not ref[:N_CTX, N_CTX + N_HIST :].any()
    assert torch.equal(ours[:N_CTX, :N_CTX], torch.ones(N_CTX, N_CTX, dtype=torch.bool).tril())
    assert not ours[:N_CTX, N_CTX:].any()

"""The decoder's `qk_norm` trait (suite/models/llama/model.py): an RMSNorm over each head's query and key before
rotary, as transformers' Qwen3Attention applies its q_norm / k_norm. Checked against transformers 5's
Qwen3ForCausalLM on the same (random) weights through the decoder's own Hugging Face name map, in float64. Both
codes compute every RMSNorm in fp32 and cast back (Qwen3RMSNorm does, unmodified here), so the float64 logits
agree to that rounding only: the bound is the fp32 noise scale measured in the test (the same reference run wholly
in fp32) and 1e-5 absolute (gap seen 4.9e-7 against a noise of 2.0e-6, AMD EPYC). Negative control: the
same weights in the decoder without the trait (the norms dropped) are far off. Parameter counts include the two
head_dim weights per layer."""

from __future__ import annotations

import pytest
import torch
from support.hf_reference import _common, randomize
from support.promised import require

from suite.models.llama import config as llama_config
from suite.models.llama import model as llama

torch.set_num_threads(1)
TOL = 1e-5  # float64 with the norms in fp32 (both codes): gaps seen ~5e-7; the negative control's ~1e-1


def qwen3_cfg(**over: object) -> llama_config.Config:
    return llama_config.Config(**{"n_layer": 2, "d_model": 64, "n_head": 4, "n_kv_head": 2, "head_dim": 16, "ffn_dim": 96,
                           "seq_len": 16, "vocab_size": 80, "rope_theta": 1e6, "norm_eps": 1e-6, "qk_norm": True,
                           **over})


def hf_qwen3(cfg: llama_config.Config):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    hf_cfg = Qwen3Config(**_common(cfg), intermediate_size=cfg.ffn_dim, hidden_act="silu",
                         attention_bias=cfg.attention_bias, use_sliding_window=False)
    hf_cfg._attn_implementation = "eager"  # explicit matmul + softmax, not our SDPA
    return Qwen3ForCausalLM(hf_cfg).eval()


def _tokens(cfg: llama_config.Config) -> torch.Tensor:
    return torch.randint(0, llama.vocab(cfg, {}), (3, cfg.seq_len), generator=torch.Generator().manual_seed(1))


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


@pytest.mark.parametrize("over", [{}, {"tie_embeddings": True}, {"attention_bias": True}])
def test_qk_norm_gives_transformers_qwen3_logits_in_float64(over):
    require("transformers")
    cfg = qwen3_cfg(**over)
    theirs = hf_qwen3(cfg).double()
    randomize(theirs)  # norms 1 + 0.1 N(0, 1): the q/k norm weights matter
    hf_state = theirs.state_dict()
    assert any(k.endswith("self_attn.q_norm.weight") for k in hf_state)
    ours = llama.Llama(cfg, llama.vocab(cfg, {})).double()
    ours.load_state_dict(llama.from_hf_state_dict(dict(hf_state)), strict=True)
    ours.eval()
    assert llama.param_count(cfg, {}) == sum(p.numel() for p in ours.parameters())
    idx = _tokens(cfg)
    with torch.no_grad():
        want, got = theirs(idx).logits, ours(idx)
        # negative control: the same weights without the trait (the norms dropped)
        plain = llama.Llama(cfg.model_copy(update={"qk_norm": False}), llama.vocab(cfg, {})).double().eval()
        plain.load_state_dict({k: v for k, v in ours.state_dict().items() if "_norm." not in k or "layers." not in k
                               or k.endswith(("attention_norm.weight", "ffn_norm.weight"))}, strict=True)
        without = plain(idx)
        noise = _gap(theirs.float()(idx).logits, want)  # the reference itself, all in fp32
    assert _gap(got, want) <= min(TOL, noise), (_gap(got, want), noise)
    assert _gap(without, want) > 1000 * TOL, _gap(without, want)


def test_qk_norm_adds_two_head_dim_weights_per_layer_to_the_count_not_to_the_flops():
    on, off = qwen3_cfg(), qwen3_cfg(qk_norm=False)
    assert llama.param_count(on, {}) - llama.param_count(off, {}) == 2 * on.head_size * on.n_layer
    assert llama.flops_per_token(on, {}) == llama.flops_per_token(off, {})

"""The suite's Qwen3.5-MoE decoder (suite/models/qwen35/decoder.py) against transformers 5.10.4's
Qwen3_5MoeForCausalLM (the text model, Qwen3_5MoeTextConfig): the same random weights give the same logits in
float32, a changed DeltaNet or output-gate weight does not, and the full shape's parameter counts are transformers'
(on the meta device) and suite/models/qwen35/model.py's."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers.models.qwen3_5_moe import configuration_qwen3_5_moe as hf_config  # noqa: E402
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as hf_model  # noqa: E402

from suite.models.qwen35 import decoder, model  # noqa: E402

# 4 layers: 3 Gated DeltaNet + 1 gated attention (interval 4, the 397B's pattern); DeltaNet 4 V / 2 K heads so the
# key heads are repeated; attention 4 Q / 2 KV heads of 32 with rotary on 8 of them (partial factor 0.25)
TINY = {"vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 4, "full_attention_interval": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16,
        "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
        "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 48, "tie_word_embeddings": False}
# float32 end to end; both sides sum the same products in other orders (transformers' chunked delta rule over 64-token
# chunks against the recurrence here, eager attention against SDPA). Measured on logits of std 1.05, max |logit| 5.1:
# ours against transformers 5.4e-5; transformers' own two delta-rule paths (chunked, recurrent) against each other
# 9.0e-5 (test_transformers_own_paths_differ_as_much). A semantic slip is orders above: the controls move it >= 0.7.
TOL = 2e-4
SEQ = 80  # > 64: transformers' chunked delta rule crosses a chunk boundary


def _hf_config(c: dict) -> hf_config.Qwen3_5MoeTextConfig:
    fields = {k: v for k, v in c.items() if k != "full_attention_interval"}
    return hf_config.Qwen3_5MoeTextConfig(**fields, full_attention_interval=c["full_attention_interval"],
                                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                           "partial_rotary_factor": 0.25})


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    cfg = _hf_config(TINY)
    cfg._attn_implementation = "eager"
    ref = hf_model.Qwen3_5MoeForCausalLM(cfg).eval()
    with torch.no_grad():  # every weight away from its initial value, at a scale where each part shows in the logits
        for name, p in ref.named_parameters():
            if name.endswith("A_log"):  # decays exp(-A softplus(.)) with A in [0.05, 1]: the state is remembered
                p.copy_(torch.empty_like(p).uniform_(0.05, 1.0).log())
            elif p.ndim == 1:  # norms off 0 (zero-centred) and 1 (DeltaNet's gated norm), dt_bias off 1
                p.add_(0.3 * torch.randn_like(p))
            elif name.endswith("embed_tokens.weight"):
                p.normal_(0.0, 1.0)
            else:  # std 1 / sqrt(fan-in): activations of order 1, router logits well apart
                p.normal_(0.0, p.shape[-1] ** -0.5)
    ours = decoder.Qwen35MoE(decoder.Config.of(ref.config.to_dict())).eval()
    decoder.load_hf_state_dict(ours, ref.state_dict())
    ids = torch.randint(0, TINY["vocab_size"], (2, SEQ), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = ref(input_ids=ids, use_cache=False).logits
    return ref, ours, ids, expected


def test_config_reads_transformers_layer_types(pair):
    ref, ours, _, _ = pair
    for bad in ({"attention_bias": True}, {"hidden_act": "gelu"}, {"rope_parameters": {"rope_type": "yarn"}}):
        with pytest.raises(ValueError):
            decoder.Config.of({**ref.config.to_dict(), **bad})
    assert decoder.Config.of({**TINY, "layer_types": ["full_attention"] * 4}).layer_types.count("full_attention") == 4
    assert list(ours.config.layer_types) == list(ref.config.layer_types)
    assert ours.config.layer_types.count("full_attention") == 1
    assert ours.layers[3].mixer.rot == 8  # 0.25 of 32


def test_logits_equal_transformers_qwen3_5_moe(pair):
    _, ours, ids, expected = pair
    with torch.no_grad():
        got = ours(ids)
    diff = (got - expected).abs().max().item()
    print(f"max |logit diff| {diff:.3e}, logits std {expected.std().item():.3f}")
    assert expected.std() > 0.1
    assert diff < TOL


def test_transformers_own_paths_differ_as_much(pair):
    """The yardstick of TOL: transformers' recurrent gated delta rule in place of its chunked one (both its own
    torch code) moves its logits by about as much as ours differ from them."""
    ref, _, ids, expected = pair
    rule = hf_model.torch_recurrent_gated_delta_rule

    def recurrent(q, k, v, g, beta, initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False,
                  **_):
        return rule(q, k, v, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel)

    mixers = [layer.linear_attn for layer in ref.model.layers if hasattr(layer, "linear_attn")]
    chunked = [m.chunk_gated_delta_rule for m in mixers]
    for m in mixers:
        m.chunk_gated_delta_rule = recurrent
    try:
        with torch.no_grad():
            own = (ref(input_ids=ids, use_cache=False).logits - expected).abs().max().item()
    finally:
        for m, f in zip(mixers, chunked, strict=True):
            m.chunk_gated_delta_rule = f
    print(f"transformers chunked vs recurrent: max |logit diff| {own:.3e}")
    assert 1e-6 < own < TOL


@pytest.mark.parametrize("param, index", [
    ("layers.0.mixer.A_log", (0,)),                 # one DeltaNet decay of one value head
    ("layers.1.mixer.conv_weight", (5, 0, 3)),      # one causal-conv tap
    ("layers.3.mixer.q_proj.weight", (40, 7)),      # a row of head 0's output gate (rows 32..63)
    ("layers.2.moe.shared_gate.weight", (0, 11)),   # the shared expert's sigmoid gate
])
def test_one_changed_weight_breaks_the_match(pair, param, index):
    """Negative control: the comparison sees each part (one weight moved by 1.0 moves logits by far more than TOL)."""
    _, ours, ids, expected = pair
    p = dict(ours.named_parameters())[param]
    with torch.no_grad():
        p[index] += 1.0
        try:
            diff = (ours(ids) - expected).abs().max().item()
        finally:
            p[index] -= 1.0
    print(f"{param}{list(index)} + 1.0: max |logit diff| {diff:.3e}")
    assert diff > 100 * TOL


def test_mtp_weights_are_ignored_and_unknown_ones_refused(pair):
    ref, ours, _, _ = pair
    state = dict(ref.state_dict())
    decoder.load_hf_state_dict(ours, {**state, "mtp.fc.weight": torch.zeros(1)})
    with pytest.raises(KeyError, match="model.layers.0.extra"):
        decoder.load_hf_state_dict(ours, {**state, "model.layers.0.extra": torch.zeros(1)})
    state.pop("model.layers.3.self_attn.q_norm.weight")
    with pytest.raises(KeyError, match="layers.3.mixer.q_norm.weight"):
        decoder.load_hf_state_dict(ours, state)


def test_the_tiny_preset_trains():
    """`qwen3.5-moe-tiny` built by the decoder: 3 DeltaNet + 1 attention layers; a loss step reaches every parameter
    (each has a finite, non-zero gradient: the routed experts over a batch that reaches all 16)."""
    torch.manual_seed(0)
    net = decoder.build("qwen3.5-moe-tiny")
    assert [layer.kind for layer in net.layers] == ["linear_attention"] * 3 + ["full_attention"]
    ids = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(2))
    logits = net(ids[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), ids[:, 1:].reshape(-1))
    loss.backward()
    dead = [n for n, p in net.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()
            or p.grad.abs().sum() == 0]
    assert not dead
    with pytest.raises(KeyError, match="no Qwen3.5-MoE decoder preset"):
        decoder.build("qwen3.5-moe-huge")


def test_parameter_counts_equal_transformers_on_the_397b_shape():
    """The full shape (model.QWEN35_397B): the suite decoder's parameters, transformers' (meta device) and
    model.py's formula are one number; the active count (routed experts top-10 of 512) is model.py's."""
    c = model.QWEN35_397B
    with torch.device("meta"):
        ours = decoder.build("qwen3.5-397b-a17b")
        ref = hf_model.Qwen3_5MoeForCausalLM(_hf_config(c))
    total = sum(p.numel() for p in ref.parameters())
    print(f"total {ours.param_count():,}, active {ours.param_count(active=True):,}")
    assert ours.param_count() == total == model.param_count()
    assert ours.param_count(active=True) == model.active_param_count()
    assert {n: p.shape for n, p in ours.named_parameters()} == {
        decoder.suite_name(n): p.shape for n, p in ref.named_parameters()}

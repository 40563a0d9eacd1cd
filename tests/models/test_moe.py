"""The Mixture-of-Experts block (suite/models/common/moe.py) and the MoE decoder against Hugging Face transformers on the
same weights: MixtralForCausalLM for softmax top-k routing (the whole model, and its load-balancing loss), and
DeepSeek-V3's MoE block for sigmoid routing with the choice bias, group-limited choice and a shared expert.

Why Mixtral: its attention is Llama's (GQA, rope, no biases, no q/k norm) and its MoE is softmax -> top-k ->
renormalise with plain SwiGLU experts, exactly this block's `score: softmax`. Qwen3-MoE adds a per-head q/k
RMSNorm, gpt-oss adds attention sinks, a clamped SwiGLU and biases, DeepSeek-V3 adds MLA attention: none of those
is in this decoder, so DeepSeek-V3 is compared block by block (its DeepseekV3MoE) instead of as a whole model.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError
from support.hf_reference import hf_mixtral, load_into_suite, randomize
from support.promised import require
from test_llama import _max_abs, _tokens, assert_parity, parity

from suite.models.common import configs as common_configs
from suite.models.common import moe
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama

torch.set_num_threads(1)


@pytest.mark.parametrize("overrides", [
    {},  # gpt-oss-tiny's shape without its attention biases: 8 experts, top-2, GQA 4/2
    {"moe": {"experts": 4, "top_k": 3}, "rope_scaling": {"original_max_position_embeddings": 64}},
])
def test_logits_equal_transformers_mixtral(overrides):
    require("transformers")
    cfg = llama_config.Config(preset="gpt-oss-tiny", attention_bias=False, **overrides)
    assert_parity(*parity(cfg, hf_mixtral(cfg)))


def test_load_balancing_loss_equals_mixtrals_per_layer_up_to_its_top_k_factor():
    """transformers' load_balancing_loss_func divides the expert counts by T where Megatron (and this block)
    divide by T * k; per layer (it would otherwise pool all layers' tokens into one loss) HF = k x ours."""
    require("transformers")
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    cfg = llama_config.Config(preset="gpt-oss-tiny", attention_bias=False, n_layer=3)
    hf_model = hf_mixtral(cfg)
    randomize(hf_model)
    ours = load_into_suite(hf_model, cfg)
    idx = _tokens(cfg)
    with torch.no_grad():
        router_logits = hf_model(idx).router_logits
        ours(idx)
    k, experts = cfg.moe.top_k, cfg.moe.experts
    ours_per_layer = [float(layer.moe.aux_loss) for layer in ours.layers]
    hf_per_layer = [float(load_balancing_loss_func((lg,), experts, k)) for lg in router_logits]
    assert ours_per_layer == pytest.approx([h / k for h in hf_per_layer], rel=1e-5)
    assert float(ours.aux_loss()) == pytest.approx(sum(ours_per_layer), rel=1e-6)
    assert min(ours_per_layer) > 1.0  # random routing is not perfectly balanced: the loss really varies


def test_load_balancing_loss_is_one_when_balanced_and_grows_with_imbalance():
    probs = torch.full((8, 4), 0.25)
    balanced = torch.tensor([[0, 1], [2, 3]] * 4)
    assert float(moe.load_balancing_loss(probs, balanced, 2)) == pytest.approx(1.0)
    skewed = torch.tensor([[0, 1]] * 8)
    peaked = torch.tensor([[0.5, 0.5, 0.0, 0.0]] * 8)
    assert float(moe.load_balancing_loss(peaked, skewed, 2)) == pytest.approx(2.0)  # E * sum f_i P_i = 4 * 0.5


def _hf_deepseek_block(mcfg: common_configs.MoEConfig, dim: int):
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

    hf_cfg = DeepseekV3Config(hidden_size=dim, moe_intermediate_size=mcfg.expert_ffn_dim,
                              n_routed_experts=mcfg.experts, num_experts_per_tok=mcfg.top_k,
                              n_shared_experts=mcfg.shared_experts, n_group=mcfg.groups,
                              topk_group=mcfg.topk_groups, norm_topk_prob=mcfg.normalize_top_k,
                              routed_scaling_factor=mcfg.routed_scaling)
    hf_cfg._experts_implementation = "eager"
    return DeepseekV3MoE(hf_cfg).eval()


def test_sigmoid_routing_block_equals_deepseek_v3_moe():
    """Sigmoid scores, a nonzero choice bias, 4 groups of which 2 are used, top-4 x 2.5, one shared expert."""
    require("transformers")
    cfg = llama_config.Config(preset="deepseek-v3-tiny")
    mcfg, dim = cfg.moe, cfg.d_model
    hf_block = _hf_deepseek_block(mcfg, dim)
    randomize(hf_block, seed=3)
    ours = moe.MoE(dim, mcfg).eval()
    prefix = "model.layers.0.mlp."
    renamed = llama.from_hf_state_dict({prefix + k: v for k, v in hf_block.state_dict().items()})
    ours.load_state_dict({k.removeprefix("layers.0.moe."): v for k, v in renamed.items()}, strict=True)
    assert float(ours.router.score_bias.abs().sum()) > 0  # the bias really takes part in the choice
    x = torch.randn(2, 24, dim, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        hf32, ours32 = hf_block(x), ours(x)
        hf64, ours64 = hf_block.double()(x.double()), ours.double()(x.double())
    noise = _max_abs(hf32, hf64)
    assert _max_abs(ours32, hf32) <= 4 * noise, (_max_abs(ours32, hf32), noise)
    assert _max_abs(ours64, hf64) <= noise


def test_group_limit_and_bias_change_the_choice():
    """Without them the same scores pick other experts: the parity above would notice a block that ignored them."""
    torch.manual_seed(0)
    cfg = common_configs.MoEConfig(experts=16, top_k=4, expert_ffn_dim=8, score="sigmoid", score_bias=True, groups=4,
                        topk_groups=2)
    router = moe.Router(32, cfg)
    torch.nn.init.normal_(router.weight, std=0.5)
    router.score_bias.normal_(std=0.5)
    x = torch.randn(64, 32)
    chosen, weights, _ = router(x)
    plain = moe.Router(32, common_configs.MoEConfig(experts=16, top_k=4, expert_ffn_dim=8, score="sigmoid"))
    plain.weight.data.copy_(router.weight.data)
    assert not torch.equal(chosen.sort(-1).values, plain(x)[0].sort(-1).values)
    groups_used = [set((row // 4).tolist()) for row in chosen]  # 4 experts a group
    assert all(len(g) <= 2 for g in groups_used)
    torch.testing.assert_close(weights.sum(-1), torch.ones(64))  # renormalised over the k (routed_scaling 1)


def test_dropless_every_assignment_is_computed_even_when_all_tokens_pick_one_expert():
    """A capacity-limited router would drop most tokens here; the block must equal the per-token sum."""
    torch.manual_seed(0)
    cfg = common_configs.MoEConfig(experts=4, top_k=2, expert_ffn_dim=16, aux_loss_coeff=0.0)
    block = moe.MoE(8, cfg)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.3)
    with torch.no_grad():
        block.router.weight.zero_()
        block.router.weight[0, 0] = block.router.weight[1, 0] = 50.0  # every token with x[0] > 0: experts 0, 1
    x = torch.randn(1, 40, 8).abs()
    chosen, weights, _ = block.router(x.view(-1, 8))
    assert set(chosen.flatten().tolist()) == {0, 1}
    ex = block.experts
    expected = torch.stack([
        sum(w * F.linear(F.silu(F.linear(t, ex.w1[e])) * F.linear(t, ex.w3[e]), ex.w2[e])
            for e, w in zip(chosen[i].tolist(), weights[i], strict=True))
        for i, t in enumerate(x.view(-1, 8))])
    torch.testing.assert_close(block(x).view(-1, 8), expected)


def test_aux_loss_gradient_reaches_the_router_as_coeff_times_its_derivative():
    torch.manual_seed(0)
    cfg = common_configs.MoEConfig(experts=6, top_k=2, expert_ffn_dim=8, aux_loss_coeff=0.01)
    block = moe.MoE(12, cfg).train().double()  # fp64: the aux part is small beside the main gradient
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x, r = torch.randn(3, 10, 12, dtype=torch.float64), torch.randn(3, 10, 12, dtype=torch.float64)

    def router_grad(scale: float) -> torch.Tensor:
        block.zero_grad()
        moe.set_aux_loss_grad_scale(scale)
        try:
            (block(x) * r).sum().backward()
        finally:
            moe.set_aux_loss_grad_scale(1.0)
        return block.router.weight.grad.clone()

    with_aux, without = router_grad(1.0), router_grad(0.0)
    _, _, aux = block.router(x.view(-1, 12))
    (expected,) = torch.autograd.grad(cfg.aux_loss_coeff * aux, block.router.weight)
    assert float(expected.abs().max()) > 0
    torch.testing.assert_close(with_aux - without, expected, rtol=1e-7, atol=1e-12)
    with torch.no_grad():  # evaluation attaches nothing and still records the value
        block.eval()(x)
    assert float(block.aux_loss) == pytest.approx(float(aux), rel=1e-6)


@pytest.mark.parametrize("fields,message", [
    ({"experts": 4, "top_k": 5}, "moe.top_k (5) is larger than moe.experts (4)"),
    ({"experts": 12, "top_k": 2, "groups": 5}, "moe.groups (5) does not divide moe.experts (12)"),
    ({"experts": 16, "top_k": 2, "groups": 4, "topk_groups": 5}, "moe.topk_groups (5) is larger than moe.groups"),
    ({"experts": 16, "top_k": 9, "groups": 4, "topk_groups": 2}, "moe.top_k (9) is larger than the experts in"),
])
def test_impossible_routing_is_refused_naming_the_field(fields, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        common_configs.MoEConfig(expert_ffn_dim=8, **fields)
    with pytest.raises(ValidationError, match=r"moe\.top_k"):
        llama_config.Config(preset="gpt-oss-tiny", moe={"top_k": 9})


@pytest.mark.parametrize("name,total_b,active_b", [("gpt-oss-20b", 20.9, 3.6)])
def test_gpt_oss_preset_has_the_published_sizes(name, total_b, active_b):
    """openai/gpt-oss-20b's model card: 21B parameters (20.9B in its safetensors), 3.6B active per token."""
    cfg = llama_config.Config(preset=name)
    assert llama.param_count(cfg, {}) / 1e9 == pytest.approx(total_b, abs=0.05)
    assert llama.active_matmul_params(cfg, {}) / 1e9 == pytest.approx(active_b, abs=0.05)

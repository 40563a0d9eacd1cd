"""LoRA on the suite's Llama decoder (suite/models/common/lora.py, `arch: hf_llama`): the same outputs and adapter
gradients as peft on transformers' LlamaForCausalLM with the same weights; only adapters train; the frozen-base
FLOPs convention (docs/metrics.md) against FlopCounterMode."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from support.hf_reference import hf_llama, load_into_suite, randomize
from support.promised import require
from test_llama import _max_abs, _tokens

from suite.models.common import configs as common_configs
from suite.models.common import lora
from suite.models.hf import config as hf_config_mod
from suite.models.hf import pretrained

torch.set_num_threads(1)
PAIRS = {"wq": "q_proj", "wk": "k_proj", "wv": "v_proj", "wo": "o_proj", "w1": "gate_proj", "w3": "up_proj",
         "w2": "down_proj"}


def _lora_cfg(**kw) -> common_configs.LoraConfig:
    return common_configs.LoraConfig(**{"rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["qkv_proj", "o_proj"], **kw})


@pytest.mark.parametrize("targets", [["qkv_proj", "o_proj"], ["wo", "w1", "w2", "w3"]])
def test_outputs_and_adapter_gradients_equal_peft_on_transformers(targets):
    require("transformers")
    require("peft")
    import peft

    cfg = hf_config_mod.Config(preset="llama3.1-tiny")
    hf_model = hf_llama(cfg)
    randomize(hf_model)
    ours = load_into_suite(hf_model, pretrained.shape(cfg))
    lcfg = _lora_cfg(target_modules=targets)
    ours = lora.apply(ours, lcfg)
    hf_targets = sorted({PAIRS[t] for t in lcfg.suite_targets()})
    theirs = peft.get_peft_model(hf_model, peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                           target_modules=hf_targets, bias="none"))
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():  # B is zero at init: give both the same non-zero adapters so the test sees them act
        for i, layer in enumerate(ours.layers):
            for name in lcfg.suite_targets():
                mine = layer.attention if name in ("wq", "wk", "wv", "wo") else layer.feed_forward
                hf_layer = theirs.base_model.model.model.layers[i]
                other = getattr(hf_layer.self_attn if name in ("wq", "wk", "wv", "wo") else hf_layer.mlp,
                                PAIRS[name])
                for part in ("lora_A", "lora_B"):
                    w = 0.1 * torch.randn(getattr(mine, name).__getattr__(part)["default"].weight.shape, generator=g)
                    getattr(mine, name).__getattr__(part)["default"].weight.copy_(w)
                    other.__getattr__(part)["default"].weight.copy_(w)
    idx = _tokens(cfg)
    ours_logits, theirs_logits = ours(idx), theirs(input_ids=idx).logits
    assert _max_abs(ours_logits.detach(), theirs_logits.detach()) < 1e-4
    for logits in (ours_logits, theirs_logits):
        F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), idx[:, 1:].reshape(-1)).backward()
    mine_grads = {n: p.grad for n, p in ours.named_parameters() if p.requires_grad}
    their_grads = {n: p.grad for n, p in theirs.named_parameters() if p.requires_grad}
    assert len(mine_grads) == len(their_grads) == 2 * len(hf_targets) * cfg.n_layer
    for i in range(cfg.n_layer):
        for name in lcfg.suite_targets():
            for part in ("lora_A", "lora_B"):
                a = next(g for n, g in mine_grads.items() if f"layers.{i}." in n and f".{name}.{part}" in n)
                b = next(g for n, g in their_grads.items() if f"layers.{i}." in n and f".{PAIRS[name]}.{part}" in n)
                assert a is not None and float(a.abs().max()) > 0
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert all(p.grad is None for n, p in ours.named_parameters() if not p.requires_grad)


def test_only_adapters_are_trained_and_held_by_the_optimizer():
    require("peft")
    from suite.algorithms.optimizers import build_optimizer
    from suite.spec import OptimizerSpec

    cfg = hf_config_mod.Config(preset="llama3.1-tiny", lora=_lora_cfg())
    model = pretrained.build(cfg, {})
    base_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    adapters_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    train = [p for p in model.parameters() if p.requires_grad]
    assert {id(p) for p in train} == {id(p) for p in lora.adapter_parameters(model)}
    assert len(train) == sum(1 for n in adapters_before) and sum(p.numel() for p in train) == \
        lora.adapter_param_count(cfg, cfg.lora, 256)
    opt = build_optimizer(OptimizerSpec(name="adamw", lr=1e-2, weight_decay=0.1), train)
    idx = _tokens(cfg)
    for _ in range(3):
        logits = model(idx)
        F.cross_entropy(logits[:, :-1].reshape(-1, 256), idx[:, 1:].reshape(-1)).backward()
        opt.step()
        opt.zero_grad()
    assert {id(p) for p in opt.state} == {id(p) for p in train}  # no optimizer state for the base
    after = dict(model.named_parameters())
    assert all(torch.equal(after[n], t) for n, t in base_before.items())
    assert all(not torch.equal(after[n], t) for n, t in adapters_before.items() if ".lora_B." in n)


@pytest.mark.parametrize(("targets", "fused"), [(["qkv_proj", "o_proj"], False),
                                               (["q_proj", "v_proj", "w1", "w2", "w3", "output"], False),
                                               (["qkv_proj", "o_proj"], True)])
def test_frozen_base_flops_match_flop_counter_within_2_percent(targets, fused):
    """Forward + backward of a LoRA step counted by FlopCounterMode (attention as explicit matmuls, SDPA's math
    path) against docs/metrics.md's convention: 4 N_base + 6 N_adapter + 12 L H Q T, less layer 0's q/k/v input
    gradient. The full-training formula (6N) would be ~50% off. With model.fused_qkv (one adapter on wqkv) at rank
    16, counting three adapters instead would be ~6% off."""
    require("peft")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    rank = {"rank": 16, "alpha": 32} if fused else {}
    cfg = hf_config_mod.Config(preset="llama3.1-tiny", n_layer=4, fused_qkv=fused,
                            lora=_lora_cfg(target_modules=targets, **rank))
    model = pretrained.build(cfg, {})
    idx = _tokens(cfg, batch=2)
    counter = FlopCounterMode(display=False)
    with sdpa_kernel(SDPBackend.MATH), counter:
        model(idx).float().sum().backward()
    counted = counter.get_total_flops() / idx.numel()
    analytic = pretrained.flops_per_token(cfg, {})
    assert analytic == pytest.approx(counted, rel=0.02), (analytic, counted)
    from suite.models.llama import model as llama

    full = llama.flops_per_token(pretrained.shape(cfg), {})
    assert abs(full / counted - 1) > 0.25  # the convention matters
    if fused:  # and the one adapter: three on the same base would count 2 x 16 x 64 x 4 layers more A
        split = cfg.model_copy(update={"fused_qkv": False})
        assert abs(pretrained.flops_per_token(split, {}) / counted - 1) > 0.04


def test_unknown_target_is_refused_naming_it():
    with pytest.raises(ValueError, match="'attn' is not a linear layer"):
        _lora_cfg(target_modules=["attn"]).suite_targets()

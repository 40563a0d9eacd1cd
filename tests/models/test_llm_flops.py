"""Analytic FLOPs of the Llama-class decoder and its MoE (suite/models/llama/model.py: 6N over the active matmul
parameters + 12*L*H*Q*T, the repo's full attention convention) within 2% of FlopCounterMode under the math SDPA
kernel (suite/measure/flops.counting), for every preset's tiny shape and the variants each option adds."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from suite.measure import flops
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama
from suite.models.llama import presets as llm_presets

torch.set_num_threads(1)
TOLERANCE = 0.02


def _loss(model, batch):
    logits = model(batch[0])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[1].reshape(-1))


def counted_flops(cfg: llama_config.Config, batch: int = 2) -> int:
    torch.manual_seed(0)
    model = llama.build(cfg, {})
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, llama.vocab(cfg, {}), (2, batch, cfg.seq_len), generator=g)
    return flops.count_train_flops(_loss, model, (tokens[0], tokens[1]))


TINY_SHAPES = sorted(set(llm_presets.TINY.values()))
CASES = [(name, {}) for name in TINY_SHAPES] + [
    ("llama3.1-tiny", {"tie_embeddings": True}),
    ("llama3.1-tiny", {"n_kv_head": 1, "attention_bias": True, "head_dim": 24}),  # MQA, biases, wide heads
    ("gpt-oss-tiny", {"moe": {"experts": 4, "top_k": 4}}),  # every expert active
    ("deepseek-v3-tiny", {"seq_len": 48, "moe": {"shared_experts": 2}}),
]


@pytest.mark.parametrize("name,overrides", CASES, ids=[f"{n}{o or ''}" for n, o in CASES])
def test_analytic_flops_match_counted(name, overrides):
    cfg = llama_config.Config(preset=name, **overrides)
    counted = counted_flops(cfg)
    analytic = llama.flops_per_sample(cfg, {}) * 2
    assert counted > 0
    assert flops.relative_error(analytic, counted) <= TOLERANCE, f"analytic {analytic:.5g} vs counted {counted:.5g}"
    by_class = llama.flops_by_class(cfg, {})
    assert sum(by_class.values()) == pytest.approx(llama.flops_per_sample(cfg, {}))
    # the attention products are really in the count (GQA counts the query heads' score and value products)
    assert counted - by_class["attention"] * 2 > 0.97 * 6 * llama.active_matmul_params(cfg, {}) * cfg.seq_len * 2


def test_every_preset_has_a_tiny_shape_of_its_family():
    for name, tiny in llm_presets.TINY.items():
        full, small = llama_config.Config(preset=name), llama_config.Config(preset=tiny)
        assert (full.moe is None) == (small.moe is None), name
        if full.moe and small.moe:
            assert (full.moe.score, full.moe.score_bias, bool(full.moe.shared_experts), full.moe.groups > 1) == (
                small.moe.score, small.moe.score_bias, bool(small.moe.shared_experts), small.moe.groups > 1), name
            assert bool(full.dense_layers) == bool(small.dense_layers), name
        assert (full.kv_heads < full.n_head) == (small.kv_heads < small.n_head), name
    assert set(llm_presets.TINY) | set(llm_presets.TINY.values()) == set(llm_presets.PRESETS)


def test_moe_flops_count_active_experts_only_and_the_router():
    """Doubling the experts at the same top-k adds only the router's 6 * d * E_added per token and layer, in
    the analytic figure and in the counted one."""
    small = llama_config.Config(preset="gpt-oss-tiny", moe={"experts": 8})
    large = llama_config.Config(preset="gpt-oss-tiny", moe={"experts": 16})
    router = 6 * small.d_model * 8 * small.seq_len * small.n_layer  # per sample
    assert llama.flops_per_sample(large, {}) - llama.flops_per_sample(small, {}) == router
    d, hidden = small.d_model, small.moe.expert_ffn_dim  # memory, unlike FLOPs, holds every expert
    assert llama.param_count(large, {}) - llama.param_count(small, {}) == small.n_layer * 8 * (3 * d * hidden + d)
    # counted (2 samples): the same difference, up to the gather-backward scatter the counter charges per routing
    delta = counted_flops(large) - counted_flops(small)
    assert delta == pytest.approx(router * 2, rel=0.01)

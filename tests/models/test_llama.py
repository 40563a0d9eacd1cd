"""The Llama-3-class decoder (suite/models/llama/model.py) against Hugging Face transformers' LlamaForCausalLM on the
same weights, its Llama 3.1 rope scaling, its presets and its refusals."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError
from support.hf_reference import hf_llama, load_into_suite, randomize
from support.promised import require

from suite.models.common.configs import RopeScaling
from suite.models.common.layers import rope_inv_freq
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama
from suite.models.llama import presets as llm_presets

torch.set_num_threads(1)


def _tokens(cfg: llama_config.Config, batch: int = 3, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, llama.vocab(cfg, {}), (batch, cfg.seq_len), generator=torch.Generator().manual_seed(seed))


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def parity(cfg: llama_config.Config, hf_model: torch.nn.Module) -> tuple[float, float, float]:
    """(ours vs HF in fp32, HF fp32 vs HF fp64 = the noise scale of fp32 rounding, ours vs HF in fp64)."""
    randomize(hf_model)
    ours = load_into_suite(hf_model, cfg)
    idx = _tokens(cfg)
    with torch.no_grad():
        hf32, ours32 = hf_model(idx).logits, ours(idx)
        hf64, ours64 = hf_model.double()(idx).logits, ours.double()(idx)
    return _max_abs(ours32, hf32), _max_abs(hf32, hf64), _max_abs(ours64, hf64)


def assert_parity(fp32_gap: float, noise: float, fp64_gap: float) -> None:
    # two fp32 computations of one function each sit within ~noise of the fp64 truth, so they differ by up to
    # ~2x noise; 4x leaves room for a different summation order. In fp64 the gap left is Hugging Face's own fp32
    # islands (eager softmax and RMSNorm upcast to fp32, also in an fp64 model), under the noise scale. A wrong
    # model is >100x the noise away (test_parity_check_sees_a_wrong_rope).
    assert noise > 0
    assert fp32_gap <= 4 * noise, f"fp32 logits differ by {fp32_gap:.3g}, the fp32 noise scale is {noise:.3g}"
    assert fp64_gap <= noise, f"fp64 logits differ by {fp64_gap:.3g} (fp32 noise {noise:.3g})"


@pytest.mark.parametrize("overrides", [
    {},  # llama3.1-tiny: GQA 4 query heads on 2 KV heads, Llama 3.1 rope scaling in all three bands
    {"n_kv_head": 1, "attention_bias": True},  # multi-query, biased projections (gpt-oss-style attention)
    {"n_kv_head": 4, "head_dim": 24, "rope_scaling": None},  # MHA, head_dim apart from d_model / n_head, plain rope
])
def test_logits_equal_transformers_llama(overrides):
    require("transformers")
    cfg = llama_config.Config(preset="llama3.1-tiny", **overrides)
    assert_parity(*parity(cfg, hf_llama(cfg)))


def test_parity_check_sees_a_wrong_rope():
    """The comparison is sharp enough to catch a model without Llama 3.1's scaling (the easiest thing to miss)."""
    require("transformers")
    cfg = llama_config.Config(preset="llama3.1-tiny")
    hf_model = hf_llama(cfg)
    randomize(hf_model)
    ours = load_into_suite(hf_model, cfg)
    ours.rotary.inv_freq.copy_(rope_inv_freq(cfg.head_size, cfg.rope_theta, None))
    idx = _tokens(cfg)
    with torch.no_grad():
        gap = _max_abs(ours(idx), hf_model(idx).logits)
        noise = _max_abs(hf_model(idx).logits, hf_model.double()(idx).logits)
    assert gap > 100 * noise


def test_rope_scaling_matches_llama31_reference_and_moves_every_band():
    """Llama 3.1's apply_scaling, written out from Meta's reference (llama-models, `apply_scaling`)."""
    import math

    scaling = RopeScaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)
    plain, scaled = rope_inv_freq(16, 500000.0), rope_inv_freq(16, 500000.0, scaling)
    expected = []
    for freq in plain.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < 64 / 4:
            expected.append(freq)
        elif wavelen > 64 / 1:
            expected.append(freq / 8)
        else:
            smooth = (64 / wavelen - 1) / (4 - 1)
            expected.append((1 - smooth) * freq / 8 + smooth * freq)
    torch.testing.assert_close(scaled, torch.tensor(expected, dtype=torch.float32))
    ratio = (plain / scaled).tolist()
    assert ratio[0] == 1.0 and ratio[-1] == pytest.approx(8.0) and any(1.0 < r < 8.0 for r in ratio)


def test_weight_map_covers_every_hf_parameter_both_ways():
    require("transformers")
    cfg = llama_config.Config(preset="llama3.1-tiny", attention_bias=True)
    hf_model = hf_llama(cfg)
    mapped = llama.from_hf_state_dict(hf_model.state_dict())
    ours = llama.build(cfg, {}).state_dict()
    assert set(mapped) == set(ours)
    assert all(mapped[k].shape == ours[k].shape for k in ours)
    with pytest.raises(KeyError, match="HF_TO_SUITE"):
        llama.suite_name("model.layers.0.self_attn.sinks")  # gpt-oss's attention sinks: not in this model


@pytest.mark.parametrize("name", ["llama3.1-8b", "llama3.1-70b", "llama3.1-405b"])
def test_llama31_presets_have_the_published_parameter_counts(name):
    """8.03B, 70.6B and 405.9B (the Hugging Face model cards' safetensors totals)."""
    published = {"llama3.1-8b": 8_030_261_248, "llama3.1-70b": 70_553_706_496, "llama3.1-405b": 405_853_388_800}
    assert llama.param_count(llama_config.Config(preset=name), {}) == published[name]


def test_tiny_preset_parameters_match_the_built_model():
    for name in llm_presets.PRESETS:
        if name.endswith("tiny"):
            cfg = llama_config.Config(preset=name)
            assert llama.param_count(cfg, {}) == sum(p.numel() for p in llama.build(cfg, {}).parameters()), name


def test_fields_beside_a_preset_override_it():
    cfg = llama_config.Config(preset="llama3.1-8b", n_layer=2, rope_scaling={"factor": 4.0})
    assert (cfg.n_layer, cfg.d_model, cfg.n_kv_head) == (2, 4096, 8)
    assert cfg.rope_scaling is not None and cfg.rope_scaling.factor == 4.0
    assert cfg.rope_scaling.original_max_position_embeddings == 8192


@pytest.mark.parametrize("fields,field_named", [
    ({"d_model": 64, "n_head": 5}, "n_head (5) does not divide d_model (64)"),
    ({"n_head": 4, "n_kv_head": 3}, "n_kv_head (3) does not divide n_head (4)"),
    ({"preset": "llama3-8b"}, "preset 'llama3-8b' is unknown; known: llama3.1-8b"),
    ({"rope_scaling": {"low_freq_factor": 4.0, "high_freq_factor": 1.0}}, "rope_scaling.high_freq_factor"),
    ({"dense_layers": 1}, "dense_layers is set without moe"),
])
def test_bad_shapes_are_refused_naming_the_field(fields, field_named):
    with pytest.raises(ValidationError, match=field_named.replace("(", r"\(").replace(")", r"\)")):
        llama_config.Config(**{"preset": "llama3.1-tiny", **fields})


def test_refusal_reaches_a_spec_naming_the_file_and_model_block():
    from suite.spec import SpecError
    from suite.specload import validate_spec

    raw = {
        "name": "nlp/x", "domain": "nlp", "version": 1, "task": "language_model",
        "model": {"arch": "llama", "preset": "llama3.1-tiny", "n_kv_head": 3},
        "data": {"name": "pydoc_topics", "batch_size": 4}, "optimizer": {"name": "adamw", "lr": 1e-3},
        "target": {"metric": "val_loss", "value": 2.0, "mode": "min", "provenance": "test"},
        "eval": {"every_steps": 10}, "budget": {"max_train_s": 10, "max_steps": 10}, "tiers": ["smoke"],
        "variants": {"tiny": {}}}
    with pytest.raises(SpecError) as e:
        validate_spec(raw, "my_llama.yaml")
    assert "my_llama.yaml" in str(e.value) and "model" in str(e.value)
    assert "n_kv_head (3) does not divide n_head (4)" in str(e.value)
    raw["model"] = {"arch": "llama", "preset": "llama3.1-tiny"}
    assert validate_spec(raw, "my_llama.yaml").model.arch == "llama"

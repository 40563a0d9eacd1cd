"""The Qwen3 family (suite/models/qwen3/, found through suite/models/families.py): a tiny random transformers 5
Qwen3ForCausalLM written to disk (safetensors + config.json, save_pretrained) and read by the suite's Hugging Face
loader gives transformers' logits in float64 (bounded as tests/models/test_qk_norm.py says: both codes compute the
norms in fp32), tied or untied; the suite's model saved back is read by transformers as a Qwen3 with the same logits;
torchtitan's model of the loaded config gives transformers' logits within fp32 noise; Megatron runs the `qwen3-tiny`
preset with the suite decoder's logits. Negative controls: the same checkpoint read without the trait (the spec's
model block saying qk_norm false) is refused naming the field, and the weights in a decoder without q/k norms are
far from transformers' logits."""

from __future__ import annotations

import json

import pytest
import torch
from support.backend_util import TESTS
from support.hf_reference import randomize
from support.promised import require
from test_qk_norm import TOL, hf_qwen3, qwen3_cfg

from suite.data.base import DataMissing
from suite.models.hf import checkpoint as ckpt
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama

torch.set_num_threads(1)


def _tokens(cfg: llama_config.Config) -> torch.Tensor:
    return torch.randint(0, llama.vocab(cfg, {}), (3, cfg.seq_len), generator=torch.Generator().manual_seed(1))


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def _saved_qwen3(folder, **over):
    """transformers' Qwen3 (random weights, norms away from 1) saved in float64; the model and its config."""
    cfg = qwen3_cfg(**over)
    theirs = hf_qwen3(cfg).double()
    randomize(theirs)
    theirs.save_pretrained(folder)
    return cfg, theirs


@pytest.mark.parametrize("over", [{}, {"tie_embeddings": True}])
def test_qwen3_saved_by_transformers_gives_its_logits_in_float64(tmp_path, over):
    require("transformers")
    cfg, theirs = _saved_qwen3(tmp_path, **over)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["architectures"] == ["Qwen3ForCausalLM"] and written["model_type"] == "qwen3"
    loaded = ckpt.config_for(tmp_path)  # from config.json alone: the family says qk_norm
    assert loaded.qk_norm and not loaded.qkv_bias and loaded.tie_embeddings == cfg.tie_embeddings
    assert ckpt.config_for(tmp_path, cfg.model_copy(update={"seq_len": loaded.seq_len})) is not None
    ours = ckpt.load_llama(tmp_path, ckpt.config_for(tmp_path, cfg)).eval()
    assert next(ours.parameters()).dtype == torch.float64
    assert llama.param_count(cfg, {}) == sum(p.numel() for p in ours.parameters())
    idx = _tokens(cfg)
    with torch.no_grad():
        want, got = theirs(idx).logits, ours(idx)
        noise = _gap(theirs.float()(idx).logits, want)
    assert _gap(got, want) <= min(TOL, noise), (_gap(got, want), noise)
    # negative control: the same weights in the decoder without q/k norms
    plain = llama.Llama(cfg.model_copy(update={"qk_norm": False}), llama.vocab(cfg, {})).double().eval()
    plain.load_state_dict({k: v for k, v in ours.state_dict().items() if not k.endswith(("q_norm.weight",
                                                                                         "k_norm.weight"))})
    with torch.no_grad():
        assert _gap(plain(idx), want) > 1000 * TOL


def test_qwen3_declared_without_qk_norm_or_with_sliding_window_is_refused(tmp_path):
    require("transformers")
    cfg, _ = _saved_qwen3(tmp_path)
    with pytest.raises(DataMissing, match="qk_norm is True in the checkpoint but False"):
        ckpt.config_for(tmp_path, cfg.model_copy(update={"qk_norm": False}))
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "use_sliding_window": True, "sliding_window": 8}))
    with pytest.raises(DataMissing, match="use_sliding_window"):
        ckpt.config_for(tmp_path, cfg)


def test_suite_qwen3_saved_back_reads_in_transformers(tmp_path):
    require("transformers")
    from transformers import AutoModelForCausalLM

    cfg = qwen3_cfg()
    ours = llama.build(cfg, {}).double().eval()
    randomize(ours, seed=3)
    ckpt.save_llama(ours, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager", dtype=torch.float64).eval()
    assert type(theirs).__name__ == "Qwen3ForCausalLM"
    idx = _tokens(cfg)
    with torch.no_grad():
        want = theirs(idx).logits
        assert _gap(ours(idx), want) <= min(TOL, _gap(theirs.float()(idx).logits, want))
    back = ckpt.load_llama(tmp_path, ckpt.config_for(tmp_path, cfg))
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), back.state_dict().values(), strict=True))


def test_torchtitan_runs_the_loaded_qwen3_with_transformers_logits(tmp_path):
    require("transformers")
    require("torchtitan.models.llama3", extra="torchtitan")
    from suite.backends.torchtitan import model as titan_model

    cfg, theirs = _saved_qwen3(tmp_path)
    loaded = ckpt.config_for(tmp_path, cfg)
    ours = ckpt.load_llama(tmp_path, loaded, dtype=torch.float32).eval()
    titan = titan_model.build(loaded, llama.vocab(loaded, {}), "sdpa").eval()
    titan_model.load_suite_weights(titan, ours, loaded)
    idx = _tokens(cfg)
    with torch.no_grad():
        want = theirs(idx).logits
        noise = _gap(theirs.float()(idx).logits, want)  # transformers' own fp32 rounding
        got = titan(idx)
    assert _gap(got, want) <= 4 * noise, (_gap(got, want), noise)


def test_megatron_runs_the_qwen3_tiny_preset_with_the_suite_logits():
    require("megatron.core")
    from suite import devices, registry
    from suite.backends.base import RunOptions
    from suite.backends.megatron.backend import MegatronBackend, supports
    from suite.data.locate import data_root
    from suite.harness import seed_everything
    from suite.specload import load_spec
    from suite.workloads.contract import Context

    spec = load_spec(TESTS / "support" / "specs" / "tiny_llama.yaml", {"model.preset": "qwen3-tiny"})
    assert supports(spec) is None
    seed_everything(0)
    workload = registry.task_class(spec.task)(spec, Context(data_root=data_root(), seed=0, device=torch.device("cpu")))
    build = workload.build_model

    def drawn():  # the q/k norm weights away from 1, so a norm left unmapped shows
        model = build()
        g = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(("q_norm.weight", "k_norm.weight")):
                    p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=g))
        return model

    workload.build_model = drawn
    seed_everything(0)
    reference = workload.build_model().eval()
    assert reference.cfg.qk_norm and reference.cfg.head_size == 32
    backend = MegatronBackend(devices.Device("cpu"))
    try:
        seed_everything(0)
        state = backend.setup(workload, RunOptions())
        model = backend.eval_model(state).eval()
        x = workload.val_x[:4]
        with torch.no_grad():
            torch.testing.assert_close(model(x), reference(x), atol=2e-5, rtol=1e-4)
    finally:
        backend.close()


def test_without_its_registry_line_a_qwen3_folder_is_refused(tmp_path, monkeypatch):
    """The registry line is what makes the family's folder count: without it the loader names what it reads."""
    require("transformers")
    from suite.models import families

    _saved_qwen3(tmp_path)
    monkeypatch.setattr(families, "FAMILIES", {k: v for k, v in families.FAMILIES.items() if k != "qwen3"})
    families.all_families.cache_clear()
    try:
        with pytest.raises(DataMissing, match=r"Qwen3ForCausalLM.*is not one this loader reads"):
            ckpt.config_for(tmp_path)
    finally:
        monkeypatch.undo()
        families.all_families.cache_clear()
    assert ckpt.config_for(tmp_path).qk_norm

"""The decoder's `qk_norm` trait (Qwen3's per-head q/k RMSNorm before rotary) under the engines that build their own
model from the suite's config: torchtitan (its GQAttention's `qk_norm`, suite/backends/torchtitan/model.py) and
Megatron-core (its `qk_layernorm`, suite/backends/megatron/llama.py), each against the suite's decoder on the same
weights, the q/k norm weights drawn away from 1 so a norm left unmapped shows. As the Llama parity tests of each
engine (tests/backends/test_backend_torchtitan.py, test_megatron_presets.py): torchtitan within 4 x the suite
model's own fp32 noise; Megatron within the presets test's 2e-5. Negative controls: torchtitan's q/k norm weights
loaded without the rotary permutation (its interleaved head layout), and the suite's model with unit q/k norm
weights, are each far outside."""

from __future__ import annotations

import pytest
import torch
from support.backend_util import TESTS
from support.promised import require

from suite.models.llama import config as llama_config
from suite.models.llama import model as llama

torch.set_num_threads(1)
TINY_LLAMA = TESTS / "support" / "specs" / "tiny_llama.yaml"


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def _draw_norms(model: torch.nn.Module, seed: int = 7) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=g))


def test_torchtitan_qk_norm_gives_the_suite_logits_and_needs_the_permutation():
    require("torchtitan.models.llama3", extra="torchtitan")
    from suite.backends.torchtitan import model as titan_model

    cfg = llama_config.Config(preset="llama3.1-tiny", qk_norm=True)
    torch.manual_seed(0)
    ours = llama.build(cfg, {})
    with torch.no_grad():
        for p in ours.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.1)
    _draw_norms(ours)
    ours.eval()
    theirs = titan_model.build(cfg, llama.vocab(cfg, {}), "sdpa").eval()
    assert theirs.layers["0"].attention.q_norm is not None
    titan_model.load_suite_weights(theirs, ours, cfg)
    idx = torch.randint(0, llama.vocab(cfg, {}), (3, cfg.seq_len), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want, got = ours(idx), theirs(idx)
        noise = _gap(want, ours.double()(idx))
        ours.float()
    assert 0 < noise and _gap(got, want) <= 4 * noise, (_gap(got, want), noise)
    back = titan_model.titan_to_suite(theirs.state_dict(), cfg)
    assert all(torch.equal(back[k], v) for k, v in ours.state_dict().items())
    sd = ours.state_dict()  # negative control: the norm weights by name alone, not permuted as the rows are
    theirs.load_state_dict({k: sd[k] for k in sd if k.endswith(("q_norm.weight", "k_norm.weight"))}, strict=False)
    with torch.no_grad():
        assert _gap(theirs(idx), want) > 1000 * noise


def test_torchtitan_refuses_qk_norm_under_tensor_parallelism():
    from suite.backends.torchtitan.backend import supports
    from suite.specload import load_spec

    spec = load_spec(TINY_LLAMA, {"model.qk_norm": True, "parallel.tp": 2})
    assert "qk_norm" in (supports(spec) or "")


def test_megatron_qk_layernorm_gives_the_suite_logits():
    require("megatron.core")
    from test_megatron_presets import _biased_workload

    from suite import devices
    from suite.backends.base import RunOptions
    from suite.backends.megatron.backend import MegatronBackend, supports
    from suite.harness import seed_everything
    from suite.specload import load_spec

    spec = load_spec(TINY_LLAMA, {"model.qk_norm": True})
    assert supports(spec) is None
    workload = _biased_workload(spec)
    build = workload.build_model

    def drawn():
        model = build()
        _draw_norms(model)
        return model

    workload.build_model = drawn
    seed_everything(0)
    reference = workload.build_model().eval()
    unit = workload.build_model().eval()
    with torch.no_grad():
        for name, p in unit.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                p.fill_(1.0)
    backend = MegatronBackend(devices.Device("cpu"))
    try:
        seed_everything(0)
        state = backend.setup(workload, RunOptions())
        names = {n for n, _ in state.raw_model.named_parameters()}
        assert "decoder.layers.0.self_attention.q_layernorm.weight" in names
        model = backend.eval_model(state).eval()
        x = workload.val_x[:4]
        with torch.no_grad():
            want, got, plain = reference(x), model(x), unit(x)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
        assert (got - plain).abs().max() > 100 * 2e-5  # the drawn norm weights matter to the comparison
    finally:
        backend.close()


@pytest.mark.parametrize("tp", [2])
def test_megatron_refuses_qk_norm_with_tensor_parallelism(tp):
    require("megatron.core")
    from suite.backends.megatron.llama_refusals import refusal
    from suite.specload import load_spec

    spec = load_spec(TINY_LLAMA, {"model.qk_norm": True})
    assert "qk_norm" in (refusal(spec, tp=tp) or "")

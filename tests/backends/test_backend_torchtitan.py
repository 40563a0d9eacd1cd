"""The torchtitan backend (suite/backends/torchtitan/backend.py, titan_model.py) against torchtitan 0.3.0's own code.

- Built from torchtitan's configs: the suite's llama3.1-8b preset gives the same parameter shapes and rope settings
  as torchtitan's own `llama3_configs["8B"]` (on the meta device).
- Weight map: torchtitan's Llama3Model on the suite model's weights gives the same logits (fp32 noise, ~1e-7);
  torchtitan's MoE (DeepSeekV3Model's block, router, grouped experts) gives the suite MoE's logits within the
  noise of torchtitan's bf16 expert matmuls (GroupedExperts casts to bf16 always), measured here as the gap between
  the suite's MoE in fp32 and in torchtitan's bf16 arithmetic; each MoE block on the same input agrees to fp32
  noise. A map that forgets the rotary row permutation is far outside.
- Training on CPU (torchtitan's ScaledDotProductAttention in place of FlexAttention): 20 steps of the test char
  Llama agree with the torch backend's curve within `noise.SAME_MATH` x the curve's noise scale (measured first:
  the same run with each batch's samples in another order and on two threads; ~1e-6 nats over 20 steps on the
  2-core Intel Xeon; torchtitan's curve seen within 1e-6).
- FlexAttention (torchtitan's LM default) really refuses to train on CPU, with the words the backend reports.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from support.backend_util import ROOT, env
from support.curves import loss_curve
from support.promised import require

from suite import devices, registry
from suite.backends import matrix as support
from suite.models.common import moe
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama
from suite.specload import load_spec

torch.set_num_threads(1)
SAME_MATH = 2.0  # x this module's own scale, the largest gap of its reorderings (tests/support/noise.py bounds instead)
require("torchtitan.models.llama3", extra="torchtitan")
from suite.backends.torchtitan import model as titan_model  # noqa: E402 - after the promised-dependency check

CHAR_LLAMA = ROOT / "tests" / "support" / "specs" / "char_llama.yaml"
STEPS = 20


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def _pair(preset: str, seed: int = 0, **overrides) -> tuple[llama_config.Config, torch.nn.Module, torch.nn.Module]:
    """The suite model (weights N(0, 0.1) so logits are O(1), a non-zero MoE score bias) and torchtitan's model
    of the same config with those weights."""
    cfg = llama_config.Config(preset=preset, **overrides)
    torch.manual_seed(seed)
    ours = llama.build(cfg, {})
    with torch.no_grad():
        for p in ours.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.1)
        for name, b in ours.named_buffers():
            if name.endswith("score_bias"):
                b.normal_(0, 0.05)
    theirs = titan_model.build(cfg, llama.vocab(cfg, {}), "sdpa")
    titan_model.load_suite_weights(theirs, ours, cfg)
    return cfg, ours.eval(), theirs.eval()


def _tokens(cfg: llama_config.Config) -> torch.Tensor:
    return torch.randint(0, llama.vocab(cfg, {}), (3, cfg.seq_len), generator=torch.Generator().manual_seed(1))


def test_the_8b_preset_builds_torchtitans_own_8b_model():
    from torchtitan.models.llama3 import llama3_configs

    theirs = llama3_configs["8B"](attn_backend="flex")
    ours = titan_model.titan_config(llama_config.Config(preset="llama3.1-8b"), 128256, "flex")
    with torch.device("meta"):
        shapes = [{k: tuple(v.shape) for k, v in c.build().state_dict().items()} for c in (theirs, ours)]
    assert shapes[0] == shapes[1] and len(shapes[0]) > 250
    a, b = theirs.layers[0].attention, ours.layers[0].attention
    assert (a.n_heads, a.n_kv_heads, type(a.inner_attention)) == (b.n_heads, b.n_kv_heads, type(b.inner_attention))
    rope = ("theta", "scaling", "scaling_factor", "low_freq_factor", "high_freq_factor",
            "original_max_position_embeddings")
    assert {f: getattr(a.rope, f) for f in rope} == {f: getattr(b.rope, f) for f in rope}


def test_llama3_logits_equal_on_the_same_weights_and_the_map_round_trips():
    cfg, ours, theirs = _pair("llama3.1-tiny")
    idx = _tokens(cfg)
    with torch.no_grad():
        want, got = ours(idx), theirs(idx)
        noise = _gap(want, ours.double()(idx))  # fp32 rounding of the suite model against its own fp64
    assert noise > 0
    assert _gap(got, want) <= 4 * noise, (_gap(got, want), noise)
    back = titan_model.titan_to_suite(theirs.state_dict(), cfg)
    sd = ours.double().float().state_dict()
    assert back.keys() == sd.keys() and all(torch.equal(back[k], sd[k]) for k in sd)


def test_a_map_without_the_rotary_permutation_is_far_outside():
    cfg, ours, theirs = _pair("llama3.1-tiny")
    wrong = {k: v for k, v in titan_model.suite_to_titan(ours.state_dict(), cfg).items()}
    for name, w in ours.state_dict().items():  # the query/key rows loaded by name alone
        if ".attention.wq." in name or ".attention.wk." in name:
            wrong[name.replace(".attention.", ".attention.qkv_linear.")] = w
    theirs.load_state_dict(wrong, strict=False)
    idx = _tokens(cfg)
    with torch.no_grad():
        want = ours(idx)
        assert _gap(theirs(idx), want) > 1000 * _gap(want, ours.double()(idx))


def _bf16_experts(self: moe.Experts, x: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The suite's experts in torchtitan's arithmetic (GroupedExperts: bf16 inputs, weights and products, the
    routing weights applied in fp32 after)."""
    tokens, k = chosen.shape
    order = torch.argsort(chosen.reshape(-1), stable=True)
    counts = torch.bincount(chosen.reshape(-1), minlength=self.w1.shape[0]).tolist()
    outputs = []
    for e, xe in enumerate(x[order // k].bfloat16().split(counts)):
        if counts[e]:
            h = F.silu(xe @ self.w1[e].bfloat16().T) * (xe @ self.w3[e].bfloat16().T)
            outputs.append(h @ self.w2[e].bfloat16().T)
    y = torch.cat(outputs)[torch.argsort(order)].float()
    return (y.view(tokens, k, -1) * weights.unsqueeze(-1)).sum(1)


@pytest.mark.parametrize("preset", ["deepseek-v3-tiny", "gpt-oss-tiny"])
def test_moe_logits_agree_within_torchtitans_bf16_expert_noise(preset, monkeypatch):
    cfg, ours, theirs = _pair(preset)
    idx = _tokens(cfg)
    seen: dict[str, tuple] = {}
    layer = str(cfg.dense_layers)  # the first MoE layer: each model's own input to it
    ours.layers[cfg.dense_layers].moe.register_forward_hook(lambda m, i, o: seen.__setitem__("ours", (i[0], o)))
    theirs.layers[layer].moe.register_forward_hook(lambda m, i, o: seen.__setitem__("theirs", (i[0], o)))
    with torch.no_grad():
        want, got = ours(idx), theirs(idx)
        monkeypatch.setattr(moe.Experts, "forward", _bf16_experts)
        bf16 = ours(idx)
        # each MoE block on the same input: torchtitan's router, dispatch, grouped experts and shared experts
        x, out = seen["theirs"]
        block = ours.layers[cfg.dense_layers].moe(x)
    noise = _gap(want, bf16)  # what bf16 expert matmuls alone move the suite's logits
    assert noise > 1e-4, noise
    assert _gap(got, want) <= 2 * noise, (_gap(got, want), noise)
    assert _gap(block, out) <= 1e-5, _gap(block, out)


def test_moe_map_carries_the_router_bias():
    cfg, ours, theirs = _pair("deepseek-v3-tiny")
    idx = _tokens(cfg)
    with torch.no_grad():
        want, got = ours(idx), theirs(idx)
        for m in theirs.modules():
            if hasattr(m, "expert_bias_E") and m.expert_bias_E is not None:
                m.expert_bias_E.zero_()
        assert _gap(theirs(idx), want) > 5 * _gap(got, want)


@pytest.mark.slow
def test_twenty_steps_match_the_torch_backend_within_its_noise():
    want = loss_curve(CHAR_LLAMA, "torch", STEPS)
    want_eval = loss_curve.last_eval["val_loss"]  # type: ignore[attr-defined]
    others = [loss_curve(CHAR_LLAMA, "torch", STEPS, permute=seed) for seed in (1, 2)]
    torch.set_num_threads(2)
    try:
        others.append(loss_curve(CHAR_LLAMA, "torch", STEPS))
    finally:
        torch.set_num_threads(1)
    noise = max(max(abs(a - b) for a, b in zip(other, want, strict=True)) for other in others)
    got = loss_curve(CHAR_LLAMA, "torchtitan", STEPS)
    tol = SAME_MATH * max(noise, 1e-6)  # the scale seen 2e-7..1e-6 here: fp32 rounding of a 2-layer model
    gap = max(abs(a - b) for a, b in zip(got, want, strict=True))
    assert gap <= tol, f"torchtitan's curve differs by {gap:.2e} (> {tol:.2e}, noise {noise:.2e}):\n{got}\n{want}"
    assert want[0] - want[-1] > 1000 * tol  # learning curves that move far more than the tolerance
    assert abs(loss_curve.last_eval["val_loss"] - want_eval) <= tol  # type: ignore[attr-defined]
    layout = loss_curve.last_layout  # type: ignore[attr-defined]
    assert (layout["framework"], layout["attention"], layout["dp"]) == ("torchtitan", "sdpa", 1)
    # two micro-batches a step, and gradient clipping (which moves the curve by ~4e-2 here): the same
    micro = loss_curve(CHAR_LLAMA, "torchtitan", STEPS, overrides={"data.micro_batch_size": 8})
    assert loss_curve.last_layout["micro_batches"] == 2  # type: ignore[attr-defined]
    assert max(abs(a - b) for a, b in zip(micro, want, strict=True)) <= tol
    clipped = [loss_curve(CHAR_LLAMA, b, STEPS, options={"grad_clip": 0.5}) for b in ("torch", "torchtitan")]
    assert max(abs(a - b) for a, b in zip(*clipped, strict=True)) <= tol
    assert max(abs(a - b) for a, b in zip(clipped[0], want, strict=True)) > 100 * tol


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_processes_fsdp_dp_and_tp_match_one_process(tmp_path):
    """torchtitan's parallelize_llama over gloo: FSDP2, HSDP-replicate, TP with sequence parallel and its
    vocab-sharded logits, TP with full activation checkpointing; one torchrun launch."""
    want = loss_curve(CHAR_LLAMA, "torch", STEPS)
    noise = max(max(abs(a - b) for a, b in zip(loss_curve(CHAR_LLAMA, "torch", STEPS, permute=seed), want,
                                                strict=True)) for seed in (1, 2))
    tol = SAME_MATH * max(noise, 1e-6)
    out = tmp_path / "curves.json"
    runs = [json.dumps({"backend": "torchtitan", "overrides": o})
            for o in ({"parallel.fsdp": 2}, {"parallel.dp": 2}, {"parallel.tp": 2}, {"parallel.tp": 2, "parallel.ac": "full"})]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "support.curves", str(out), str(CHAR_LLAMA), str(STEPS), *runs]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=540)
    assert p.returncode == 0, p.stderr[-4000:]
    for r in json.loads(out.read_text()):
        gap = max(abs(a - b) for a, b in zip(r["losses"], want, strict=True))
        assert gap <= tol, (r["overrides"], gap, noise)  # seen <= 7.2e-7 (noise 4.8e-7): the same sums, two ranks
        for key, value in r["overrides"].items():
            assert r["layout"][key.split(".")[1]] == value


def test_flex_attention_has_no_cpu_backward_and_the_backend_says_so():
    from torch.nn.attention.flex_attention import create_block_mask
    from torchtitan.models.common.attention import FlexAttention

    from suite.backends.torchtitan.backend import NO_CPU_BACKWARD

    q = torch.randn(1, 16, 2, 8, requires_grad=True)  # (B, L, N, H), torchtitan's layout
    mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, 1, None, 16, 16, device="cpu", _compile=False)
    with pytest.raises(NotImplementedError, match="FlexAttention does not support backward on CPU") as e:
        FlexAttention(FlexAttention.Config())(q, q, q, attention_masks=mask)
    assert "does not support backward on CPU" in str(e.value) and "does not support backward on CPU" in NO_CPU_BACKWARD
    backend = registry.backend_class("torchtitan")(devices.current())
    avail = backend.available()
    assert avail.ok and avail.version == "0.3.0" and "FlexAttention" in avail.reason
    spec = load_spec(CHAR_LLAMA)
    spec = spec.model_copy(update={"backends": {"torchtitan": {"attention": "flex"}}})
    workload = registry.task_class(spec.task)(spec, _ctx())
    from suite.backends.base import RunOptions

    with pytest.raises(ValueError, match="FlexAttention has no backward on CPU"):
        backend.setup(workload, RunOptions(options={"attention": "flex"}))


def test_flex_attention_with_the_masks_the_backend_makes_gives_the_same_logits(monkeypatch):
    """The CUDA path (attention: flex, torchtitan's LM default): the backend's wrapper builds the masks from token
    positions as torchtitan's data loader would (one causal document per row); forward runs on CPU. torchtitan's
    torch.compile wrappers of flex_attention and create_block_mask swapped for the same functions in eager mode
    (compiling them on CPU takes ~1 min)."""
    import torchtitan.models.common.attention as attention
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from suite.backends.torchtitan.backend import _WithMasks

    monkeypatch.setattr(attention, "_compiled_create_block_mask", create_block_mask)
    monkeypatch.setattr(attention.FlexAttention, "_compiled_flex_attn", staticmethod(flex_attention))
    cfg, ours, sdpa = _pair("llama3.1-tiny")
    flex = titan_model.build(cfg, llama.vocab(cfg, {}), "flex")
    titan_model.load_suite_weights(flex, ours, cfg)
    idx = _tokens(cfg)
    with torch.no_grad():
        want, got = ours(idx), _WithMasks(flex).eval()(idx)
        noise = _gap(want, ours.double()(idx))
    assert _gap(got, want) <= 4 * noise, (_gap(got, want), noise)


def _ctx():
    from suite.data.locate import data_root
    from suite.workloads.contract import Context

    return Context(data_root=data_root(), seed=0, device=torch.device("cpu"))


@pytest.mark.parametrize(("overrides", "reason"), [
    ({"model": {"arch": "gpt", "n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 64}}, "use model.arch llama"),
    ({"parallel": {"pp": 2, "fsdp": 2}}, "parallel.pp with dp/fsdp/tp"),
    ({"parallel": {"cp": 2}}, "parallel.cp"),
    ({"parallel": {"tp": 2, "loss_parallel": False}}, "always shards the LM head's logits"),
    ({"parallel": {"tp": 4}}, "parallel.tp=4 does not divide model.n_kv_head=2"),
    ({"parallel": {"tp": 2}, "model": {"preset": "deepseek-v3-tiny"}}, "MoE"),
])
def test_what_it_cannot_run_is_refused_with_the_field_to_change(overrides, reason):
    spec = load_spec(CHAR_LLAMA)
    data = spec.model_dump()
    for key, value in overrides.items():
        data[key] = {**(data.get(key) or {}), **value}
        if key == "model" and value.get("arch") == "gpt":
            data[key] = value
    changed = type(spec).model_validate(data)
    got = support.unsupported_reason("torchtitan", changed)
    assert got is not None and reason in got, got
    assert support.unsupported_reason("torchtitan", spec) is None
    assert support.unsupported_reason("torchtitan", load_spec(ROOT / "tests" / "support" / "specs" / "char_gpt.yaml"))

"""Activation checkpointing (`parallel.ac`) in Megatron-core (TransformerConfig's recompute_granularity) as in
the torch backend: the recomputation really happens (counted forward calls in one step), changes no number
(bit-identical curve against the same backend without it, allowed 1e-6: the same ops re-run), and is
recorded with the recompute share that HFU uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from support.backend_util import CHAR_GPT
from support.curves import loss_curve

from suite.specload import load_spec

torch.set_num_threads(1)

STEPS = 20
TINY_LLAMA = Path(__file__).parents[1] / "support" / "specs" / "tiny_llama.yaml"


def _forward_calls(backend: str, ac: str, modules: dict[str, Any], spec_path: Any = CHAR_GPT) -> dict[str, int]:
    """Forward calls of the named modules (a getter on the trained model each) during one training step."""
    from suite import devices, registry
    from suite.backends.base import RunOptions
    from suite.data.locate import data_root
    from suite.harness import seed_everything
    from suite.workloads.contract import Context

    spec = load_spec(spec_path, {"parallel.ac": ac})
    seed_everything(0)
    device = devices.current(0)
    workload = registry.task_class(spec.task)(spec, Context(data_root=data_root(), seed=0, device=device.torch))
    be = registry.backend_class(backend)(device)
    try:
        state = be.setup(workload, RunOptions())
        counts = dict.fromkeys(modules, 0)
        handles = []
        for name, get in modules.items():
            def bump(*_: Any, name: str = name) -> None:
                counts[name] += 1

            handles.append(get(state.raw_model).register_forward_hook(bump))
        be.train_step(state, next(iter(workload.train_batches(0, 1))))
        for h in handles:
            h.remove()
        return counts
    finally:
        be.close()


MEGATRON_MODULES = {"layer": lambda m: m.decoder.layers[0],
                    "core_attention": lambda m: m.decoder.layers[0].self_attention.core_attention,
                    "mlp": lambda m: m.decoder.layers[0].mlp}


@pytest.mark.parametrize(("ac", "expect"), [
    ("none", {"layer": 1, "core_attention": 1, "mlp": 1}),
    ("full", {"layer": 2, "core_attention": 2, "mlp": 2}),  # the whole layer again in backward
    ("selective", {"layer": 1, "core_attention": 2, "mlp": 1}),  # only the core attention again
])
def test_megatron_recomputes_what_parallel_ac_asks(ac, expect):
    assert _forward_calls("megatron", ac, MEGATRON_MODULES) == expect


def test_torch_full_checkpointing_recomputes_each_block():
    blocks = {"block": lambda m: m.blocks[0], "mlp_in": lambda m: m.blocks[0].fc}
    assert _forward_calls("torch", "none", blocks) == {"block": 1, "mlp_in": 1}
    full = _forward_calls("torch", "full", blocks)
    assert full["mlp_in"] == 2 and full["block"] >= 1  # the wrapped block's own forward runs again in backward


def test_torch_full_checkpointing_recomputes_each_llama_layer():
    """The Llama-class decoder's `layers` are wrapped as the GPT's `blocks` are (dense and MoE presets)."""
    layer = {"layer": lambda m: m.layers[0], "ffn_in": lambda m: m.layers[0].feed_forward.w1}
    assert _forward_calls("torch", "none", layer, TINY_LLAMA) == {"layer": 1, "ffn_in": 1}
    full = _forward_calls("torch", "full", layer, TINY_LLAMA)
    assert full["ffn_in"] == 2 and full["layer"] >= 1


def test_torch_llama_checkpointing_changes_nothing_but_memory():
    want = loss_curve(TINY_LLAMA, "torch", 8)
    got = loss_curve(TINY_LLAMA, "torch", 8, overrides={"parallel.ac": "full"})
    assert max(abs(a - b) for a, b in zip(got, want, strict=True)) <= 1e-6, (got, want)
    lay = loss_curve.last_layout  # type: ignore[attr-defined]
    assert lay["activation_checkpointing"] == "full" and 0.5 < lay["recompute_fraction"] < 1, lay
    # the share against the model's own count: the layers' matmuls and attention of the forward, not the head
    from suite.backends.parallel.checkpoint import recompute_fraction
    from suite.models.llama import config as llama_config
    from suite.models.llama import model as llama

    cfg = llama_config.Config(preset="llama3.1-tiny", seq_len=64, vocab_size=100)
    model = llama.build(cfg, {"vocab_size": 100})
    head = 100 * cfg.d_model
    fwd = llama.flops_per_token(cfg, {"vocab_size": 100}) / 3
    assert recompute_fraction("full", model) == pytest.approx((fwd - 2 * head) / fwd, rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("ac", ["full", "selective"])
def test_megatron_checkpointing_changes_nothing_but_memory(ac):
    want = loss_curve(CHAR_GPT, "megatron", STEPS)
    got = loss_curve(CHAR_GPT, "megatron", STEPS, overrides={"parallel.ac": ac})
    gap = max(abs(a - b) for a, b in zip(got, want, strict=True))
    assert gap <= 1e-6, (ac, got, want)
    assert want[-1] < want[0] - 0.5
    lay = loss_curve.last_layout  # type: ignore[attr-defined]
    assert lay["ac"] == lay["activation_checkpointing"] == ac
    # the layers' share of the forward under full; core attention (4·L·d·T of it) under selective
    assert (0.5 < lay["recompute_fraction"] < 1) if ac == "full" else (0 < lay["recompute_fraction"] < 0.3)


def test_the_matrix_lists_megatron_checkpointing():
    from suite import registry
    from suite.backends.matrix import layout_matrix
    from suite.specload import load_spec as load

    grid = layout_matrix({"nlp/topics_gpt": load(registry.find_workload("nlp/topics_gpt"))}, ["megatron"])
    assert grid["nlp/topics_gpt"]["megatron"]["ac=full"] is None

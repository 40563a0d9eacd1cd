"""Megatron runs the 2026 presets' attention (suite/backends/megatron/llama.py): gpt-oss's `attention_bias` (q, k, v
and o) as Megatron's `add_bias_linear`, with the MLP / expert / router biases that option adds and the suite's
decoder lacks removed; Qwen2's `qkv_bias` as `add_qkv_bias`. Checked by logits: the suite's model with
random (nonzero) biases and Megatron's GPTModel built from it agree, and the same comparison against the model with
its biases zeroed does not (the check sees the biases). A train step moves the mapped biases; the unmapped
ones are absent. And the dense Llama 3.1 8B recipe's tiny variant runs under Megatron from the CLI with the recipe's
activation checkpointing over two data-parallel ranks."""

from __future__ import annotations

import json

import pytest
import torch
from support.backend_util import TESTS, json_rows, trainbench
from support.promised import require

from suite import devices, registry
from suite.backends.base import RunOptions
from suite.backends.megatron.backend import MegatronBackend, supports
from suite.data.locate import data_root
from suite.harness import seed_everything
from suite.specload import load_spec
from suite.workloads.contract import Context

torch.set_num_threads(1)
require("megatron.core")

TINY_LLAMA = TESTS / "support" / "specs" / "tiny_llama.yaml"
TINY_MOE = TESTS / "support" / "specs" / "tiny_moe.yaml"


def _biased_workload(spec):
    """The workload, its `build_model` giving the seeded model with every bias drawn N(0, 0.5) (the suite's init
    zeroes biases, which would hide a bias left unmapped)."""
    seed_everything(0)
    workload = registry.task_class(spec.task)(spec, Context(data_root=data_root(), seed=0,
                                                            device=torch.device("cpu")))
    build = workload.build_model

    def biased():
        model = build()
        g = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(".bias"):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        return model

    workload.build_model = biased
    return workload


@pytest.mark.parametrize(("spec", "sets"), [
    (TINY_LLAMA, {"model.attention_bias": True}),  # gpt-oss's biased attention on the dense decoder
    (TINY_LLAMA, {"model.qkv_bias": True}),  # Qwen2's
    (TINY_MOE, {"model.attention_bias": True}),  # gpt-oss-tiny as its preset has it: MoE with biased attention
])
def test_megatron_maps_attention_biases_to_its_own_options(spec, sets):
    spec = load_spec(spec, sets)
    assert supports(spec) is None
    workload = _biased_workload(spec)
    seed_everything(0)
    reference = workload.build_model().eval()
    unbiased = workload.build_model().eval()
    with torch.no_grad():
        for name, p in unbiased.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
    backend = MegatronBackend(devices.Device("cpu"))
    try:
        seed_everything(0)
        state = backend.setup(workload, RunOptions())
        model = backend.eval_model(state).eval()
        x = workload.val_x[:4]
        with torch.no_grad():
            want, got, without = reference(x), model(x), unbiased(x)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
        assert (got - without).abs().max() > 100 * 2e-5  # the biases matter to the comparison
        gpt = state.raw_model
        names = {n for n, _ in gpt.named_parameters()}
        assert "decoder.layers.0.self_attention.linear_qkv.bias" in names
        assert ("decoder.layers.0.self_attention.linear_proj.bias" in names) is bool(sets.get("model.attention_bias"))
        assert not [n for n in names if ".mlp." in n and n.endswith("bias")]  # none the suite's decoder lacks
        before = {n: p.detach().clone() for n, p in gpt.named_parameters() if "self_attention" in n
                  and n.endswith("bias")}
        loss = backend.train_step(state, next(iter(workload.train_batches(0, 1)))).loss
        assert torch.isfinite(loss)
        after = dict(gpt.named_parameters())
        assert before and all(not torch.equal(after[n], b) for n, b in before.items())  # the mapped biases train
    finally:
        backend.close()


@pytest.mark.slow
def test_the_llama31_8b_recipe_runs_under_megatron_at_a_tiny_size(tmp_path):
    """The full recipe's layout is fsdp=8 with full activation checkpointing; on CPU Megatron shards nothing (its
    distributed optimizer is CUDA's), so the tiny variant runs the recipe's checkpointing over two data-parallel
    ranks, from the CLI, on the synthetic stand-in of its data."""
    data = tmp_path / "data"
    prep = trainbench("data", "prepare", "megatron_indexed", "--synthetic", TRAINBENCH_DATA=str(data))
    assert prep.returncode == 0, prep.stderr
    spec = load_spec(registry.workload_files()["nlp/llama31_8b"])
    assert spec.parallel.ac == "full"
    p = trainbench("run", "nlp/llama31_8b", "--variant", "tiny", "--backend", "megatron", "--nproc", "2",
                   "--parallel", "dp=2,ac=full", "--results", str(tmp_path / "results"), "--json",
                   TRAINBENCH_DATA=str(data))
    assert p.returncode == 0, p.stderr[-3000:]
    (row,) = json_rows(p.stdout)
    assert row["backend"] == "megatron" and row["status"] == "budget" and row["steps"] == 6
    written = json.loads(next(q for q in (tmp_path / "results").rglob("*.json") if ".index" not in q.parts
                              and "llama31_8b" in str(q)).read_text())
    assert written["parallel"]["dp"] == 2 and written["parallel"]["ac"] == "full"
    assert torch.isfinite(torch.tensor(row["final_metrics"]["val_loss"]))

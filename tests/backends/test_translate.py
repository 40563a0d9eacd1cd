"""A spec's `parallel.fsdp` translated into each engine's mechanism (suite/backends/translate.py), not refused:
what the support matrix says, and what each refusal names. The curves are in test_translate_parity.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.backends import translate
from suite.backends.deepspeed import backend as deepspeed
from suite.backends.megatron import backend as megatron
from suite.specload import load_spec

ROOT = Path(__file__).resolve().parents[2]
LLAMA31 = ROOT / "workloads" / "nlp" / "llama31_8b.yaml"
DEEPSEEK = ROOT / "workloads" / "nlp" / "deepseekv3_671b.yaml"
TINY_LLAMA = ROOT / "tests" / "support" / "specs" / "tiny_llama.yaml"


def test_fsdp_reads_as_each_engines_mechanism():
    assert translate.fsdp_mapping("deepspeed", 8).describe() == (
        "fsdp=8 -> ZeRO-3 over 8 ranks (parameters, gradients, optimizer state sharded)")
    cuda, cpu = translate.fsdp_mapping("megatron", 8, "cuda"), translate.fsdp_mapping("megatron", 8, "cpu")
    assert "distributed optimizer over 8 ranks" in cuda.describe() and not cuda.params_sharded
    assert "ZeroRedundancyOptimizer" in cpu.describe() and cpu.optimizer_sharded and not cpu.grads_sharded
    assert "parameters and gradients whole on every rank" in cpu.describe()
    assert translate.fsdp_mapping("torchtitan", 4).params_sharded
    with pytest.raises(KeyError):
        translate.fsdp_mapping("verl", 2)


def test_the_llama_recipe_runs_under_deepspeed_and_megatron_as_declared():
    spec = load_spec(LLAMA31)
    assert spec.parallel.fsdp == 8 and deepspeed.supports(spec) is None and megatron.supports(spec) is None


@pytest.mark.parametrize(("sets", "message"), [
    ({"backends.deepspeed.zero_stage": 1}, "parallel.fsdp=8 means ZeRO-3 (parameters, gradients and optimizer state "
     "sharded) but backends.deepspeed.zero_stage is 1"),
    ({"parallel.dp": 2}, "DeepSpeed's form of it is MiCS (zero_optimization.mics_shard_size=8"),
])
def test_deepspeed_refuses_only_what_it_cannot_say(sets, message):
    assert message in (deepspeed.supports(load_spec(LLAMA31, sets)) or "")
    # zero_stage 3 written out is the same statement: no contradiction
    assert deepspeed.supports(load_spec(LLAMA31, {"backends.deepspeed.zero_stage": 3})) is None


def test_deepspeed_names_the_engine_limit_under_a_pipeline():
    reason = deepspeed.supports(load_spec(DEEPSEEK, {"parallel": {"fsdp": 64, "pp": 4, "ac": "full"}}))
    assert "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in reason
    assert "deepspeed/runtime/pipe/engine.py" in reason
    # the recipe's own layout (pp=4 x ep=64): the pipeline engine's contract comes first
    assert "needs the model as a PipelineModule" in deepspeed.supports(load_spec(DEEPSEEK))


def test_megatron_refuses_partial_sharding_naming_what_it_would_need():
    assert "num_distributed_optimizer_instances" in megatron.supports(load_spec(LLAMA31, {"parallel.dp": 2}))
    with pytest.raises(ValueError, match="ZeroRedundancyOptimizer"):
        translate.megatron_mapping(2, 2, "cpu")
    assert translate.megatron_mapping(2, 2, "cuda").mechanism == "Megatron's distributed optimizer"
    assert translate.megatron_mapping(1, 1, "cpu") is None
    with pytest.raises(ValueError, match="does not yet reproduce pp x dp's update"):  # seen 2e-3 apart: refused
        translate.megatron_mapping(2, 1, "cpu", pp=2)
    assert translate.megatron_mapping(2, 1, "cuda", pp=2) is not None
    assert megatron.supports(load_spec(TINY_LLAMA, {"parallel.fsdp": 2})) is None

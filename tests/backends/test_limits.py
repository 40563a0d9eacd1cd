"""Every MLPerf Training 6.1 recipe in the support matrix: which backends hold it, and for each that does not,
whether that is the engine's own limit (named from its installed package or upstream issue) or a part of the engine
TrainBench does not wire (suite/backends/limits.py), never a bare "no"."""

from __future__ import annotations

import json

import pytest

from suite import registry
from suite.backends.limits import classify
from suite.backends.matrix import load_all, matrix
from suite.spec import MLPERF_BENCHMARKS

ENGINES = ("torch", "deepspeed", "megatron", "torchtitan", "verl")


@pytest.fixture(scope="module")
def recipes():
    specs, problems = load_all(registry.workload_files())
    assert not problems
    chosen = {n: s for n, s in specs.items() if s.mlperf_benchmark in MLPERF_BENCHMARKS}
    assert {s.mlperf_benchmark for s in chosen.values()} == set(MLPERF_BENCHMARKS)  # every 6.1 recipe has a spec
    return chosen, matrix(chosen, list(ENGINES))


def test_every_refused_cell_of_a_61_recipe_says_which_kind_of_no(recipes):
    specs, grid = recipes
    for name, row in grid.items():
        for backend, reason in row.items():
            if reason is None:
                continue
            limit = classify(backend, specs[name])
            assert limit.kind in ("engine limit", "not wired") and len(limit.why) > 40, (name, backend)


def test_llama31_8b_runs_under_every_llm_engine(recipes):
    _, grid = recipes
    assert [b for b in ("torch", "deepspeed", "megatron", "torchtitan") if grid["nlp/llama31_8b"][b]] == []


def test_llama2_70b_lora_runs_under_torchtitan_and_what_it_refuses_says_which_kind(recipes):
    """Issue 45: torchtitan's LoRAConverter holds the recipe (tests/backends/test_torchtitan_lora.py); what the
    backend still refuses of it is a gap of TrainBench's, but for a target torchtitan's converter cannot place."""
    specs, grid = recipes
    spec = specs["nlp/llama2_70b_lora"]
    assert [b for b in ("torch", "deepspeed", "megatron", "torchtitan") if grid["nlp/llama2_70b_lora"][b]] == []
    data = spec.model_dump()
    tp = type(spec).model_validate({**data, "parallel": {"tp": 2}})
    assert matrix({"x": tp}, ["torchtitan"])["x"]["torchtitan"] is not None
    assert classify("torchtitan", tp).kind == "not wired" and "LoRAConverter" in classify("torchtitan", tp).why
    lora = {**data["model"]["lora"], "target_modules": ["k_proj", "o_proj"]}
    k_only = type(spec).model_validate({**data, "model": {**data["model"], "fused_qkv": False, "lora": lora}})
    assert matrix({"x": k_only}, ["torchtitan"])["x"]["torchtitan"] is not None
    limit = classify("torchtitan", k_only)
    assert limit.kind == "engine limit" and "wkv" in limit.why, limit


@pytest.mark.parametrize(("name", "backend", "kind", "named"), [
    ("rec/dlrmv4", "megatron", "engine limit", "megatron.core.models"),
    ("rec/dlrmv4", "torchtitan", "engine limit", "torchtitan.models"),
    ("rec/dlrmv4", "verl", "engine limit", "post-training framework"),
    ("cv/flux1", "megatron", "engine limit", "no diffusion transformer"),
    ("nlp/llama2_70b_lora", "verl", "engine limit", "verl/utils/distributed.py:63"),  # on a host without CUDA
    ("rl/qwen35_397b_grpo", "verl", "engine limit", "verl-project/verl#3266"),
    ("nlp/deepseekv3_671b", "deepspeed", "engine limit", "deepspeed/runtime/pipe/engine.py"),
])
def test_a_gap_of_trainbench_is_never_called_the_engines_limit(recipes, name, backend, kind, named):
    specs, grid = recipes
    assert grid[name][backend] is not None, (name, backend)  # still refused: when it runs, drop the row
    limit = classify(backend, specs[name])
    assert (limit.kind, named in limit.why) == (kind, True), limit


@pytest.mark.parametrize(("name", "kind", "named"), [
    ("rl/gsm8k_grpo", "engine limit", "from vllm import"),  # torchtitan's RL loop: an experiment on vLLM and Monarch
    ("nlp/gpt2_124m", "engine limit", "ships no GPT-2"),
])
def test_the_full_tier_llm_workloads_torchtitan_refuses_name_its_limit(name, kind, named):
    specs, problems = load_all({name: registry.workload_files()[name]})
    assert not problems
    grid = matrix(specs, ["torchtitan"])
    assert grid[name]["torchtitan"] is not None, name  # still refused: when it runs, drop the row
    limit = classify("torchtitan", specs[name])
    assert (limit.kind, named in limit.why) == (kind, True), limit


def test_the_matrix_says_why_the_recommenders_tables_are_not_torchrecs():
    """Issue 46: where TorchRec cannot run here, `list --matrix` says why (the torch cell's note); no other cell has
    one."""
    from support.backend_util import trainbench

    p = trainbench("list", "--matrix", "--json")
    assert p.returncode == 0, p.stderr
    cells = json.loads(p.stdout)
    noted = {(wl, b) for wl, row in cells.items() for b, c in row.items() if "note" in c}
    assert noted == {(wl, "torch") for wl in cells if wl.startswith("rec/")}
    assert "does not load" in cells["rec/dlrmv4"]["torch"]["note"] and "TorchRec" in cells["rec/dlrmv4"]["torch"]["note"]

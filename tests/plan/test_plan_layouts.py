"""`trainbench plan` (suite/plan/): the MLPerf LLM recipes laid out at full size per rank, without the hardware.

Checked against code nobody here wrote where it can be: the torch backend's shards are FSDP2's own (`fully_shard`
on meta tensors under torch's fake process group), and a CPU-sized plan against torch's MemTracker. The per-rank
peak agrees with the estimator (suite/measure/llm_memory.py) within 10% wherever the engine holds the state as the
estimator assumes (FSDP with a reduce-scatter per micro-batch, ZeRO-3); where it does not (the torch backend's
no-sync accumulation, Megatron's whole weights and gradients) the difference is exactly what the engine keeps more.
"""

from __future__ import annotations

import json

import pytest
from support.backend_util import trainbench
from support.memtrack import in_fresh_process

from suite import registry
from suite.measure import llm_memory
from suite.plan import memory as plan
from suite.specload import load_spec

GB = 10**9
H100, GB300 = 80 * GB, 288 * GB  # NVIDIA's datasheets: H100 SXM 80 GB HBM3, GB300 288 GB HBM3e


def spec(name: str, sets: dict | None = None):
    return load_spec(registry.workload_files()[name], sets or {})


@pytest.mark.parametrize("backend", ["torch", "torchtitan", "deepspeed", "megatron"])
def test_llama31_8b_plans_at_8_ranks_under_every_engine(backend):
    p = plan.plan(spec("nlp/llama31_8b"), backend, 8, H100, meta=False)
    (stage,) = p.stages
    assert (p.micro_batch, p.micro_batches, stage.layers) == (1, 4, (0, 32))
    assert p.run_refusal is None  # and `trainbench run` takes it as declared
    total = 8.03e9  # Llama 3.1 8B with its 128,256-token vocabulary
    if backend == "megatron":  # ZeRO-1: every rank holds the whole model, the optimizer state an eighth
        assert "distributed optimizer over 8 ranks" in p.mapping
        assert abs(stage.params - total) < 0.01 * total and stage.optimizer_bytes == pytest.approx(total * 12 / 8, 0.01)
    else:
        assert abs(stage.params - total / 8) < 0.01 * total / 8
        assert stage.weights_bytes + stage.grads_bytes + stage.optimizer_bytes == pytest.approx(16 * total / 8, 0.01)
    assert stage.peak_bytes < H100


@pytest.mark.parametrize("backend", ["torchtitan", "deepspeed"])
def test_fsdp_and_zero3_agree_with_the_estimator_within_ten_percent(backend):
    s = spec("nlp/llama31_8b")
    want = llm_memory.estimate_llama_spec(s).peak_bytes
    got = plan.plan(s, backend, 8, H100, meta=False).peak_bytes
    assert abs(got / want - 1) <= 0.10, (got, want)
    # DeepSeek-V3 at 256 ranks where the estimator can say it too (one FSDP group of 256, no pipeline)
    d = spec("nlp/deepseekv3_671b", {"parallel": {"fsdp": 256, "ac": "full"}})
    want = llm_memory.estimate_llama_spec(d).peak_bytes
    got = plan.plan(d, backend, 256, 10**15, meta=False).peak_bytes
    assert abs(got / want - 1) <= 0.10, (got, want)


def test_the_torch_backends_no_sync_accumulation_is_what_it_adds():
    s = spec("nlp/llama31_8b")
    p = plan.plan(s, "torch", 8, H100, meta=False)
    assert p.stages[0].no_sync_grads_bytes == pytest.approx(8.03e9 * 4, rel=0.01)  # fp32 unsharded gradients
    one = spec("nlp/llama31_8b", {"data.micro_batch_size": 4})  # one micro-batch: nothing accumulates
    q = plan.plan(one, "torch", 8, H100, meta=False)
    assert q.stages[0].no_sync_grads_bytes == 0 and q.micro_batches == 1
    assert abs(q.peak_bytes / llm_memory.estimate_llama_spec(one).peak_bytes - 1) <= 0.10


@pytest.mark.parametrize("backend", ["torch", "torchtitan", "megatron"])
def test_deepseek_v3_plans_at_256_ranks_on_the_references_devices(backend):
    p = plan.plan(spec("nlp/deepseekv3_671b"), backend, 256, GB300, meta=False)
    assert [st.layers for st in p.stages] == [(0, 15), (15, 31), (31, 47), (47, 61)]  # torchtitan's split of 61
    assert sum(st.params for st in p.stages) > 0 and all(st.peak_bytes <= GB300 for st in p.stages)
    assert [st.in_flight for st in p.stages] == [4, 3, 2, 1]  # 1F1B
    names = {c.name.split(" (")[0] for st in p.stages for c in st.collectives}
    assert "all-to-all of routed tokens" in names and "send/recv of activations and their gradients" in names
    # full AC re-runs each MoE layer's dispatch and combine in backward: 6 exchanges a layer and micro-batch, not 4
    bare = plan.plan(spec("nlp/deepseekv3_671b", {"parallel.ac": "none"}), backend, 256, 4 * GB300, meta=False)
    a2a = [[c.per_step for c in st.collectives if c.name.startswith("all-to-all")] for st in (p.stages[0], bare.stages[0])]
    assert a2a[0][0] * 4 == a2a[1][0] * 6, a2a
    # not on an H100: the first stage that does not fit is named
    with pytest.raises(plan.PlanError, match=r"stage \d \(layers \d+-\d+\) needs [\d.]+ GB per rank"):
        plan.plan(spec("nlp/deepseekv3_671b"), backend, 256, H100, meta=False)


def test_deepspeed_names_its_engine_limit_for_the_pipelined_recipe():
    with pytest.raises(plan.PlanError, match="DeepSpeed's pipeline engine needs the model as a PipelineModule"):
        plan.plan(spec("nlp/deepseekv3_671b"), "deepspeed", 256, GB300, meta=False)


@pytest.mark.parametrize(("sets", "world", "message"), [
    ({}, 12, "does not divide the 12 processes"),
    ({"parallel": {"pp": 62, "ac": "full"}}, 62, "parallel.pp=62 is more stages than model.n_layer=61"),
    ({"parallel": {"ep": 3, "pp": 4}, "data.batch_size": 12}, 12, "parallel.ep=3 does not divide model.moe.experts=256"),
    ({"parallel": {"tp": 3}}, 3, "parallel.tp=3 does not divide model.n_head=128"),
    ({"data.batch_size": 100}, 256, "data.batch_size 100 does not split over 64 data-parallel ranks"),
])
def test_the_first_thing_that_does_not_divide_is_named(sets, world, message):
    with pytest.raises(plan.PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan.plan(spec("nlp/deepseekv3_671b", sets), "torch", world, GB300, meta=False)


def test_stage_split_is_torchtitans():
    assert plan.stage_split(61, 4) == [(0, 15), (15, 31), (31, 47), (47, 61)]
    assert plan.stage_split(32, 2) == [(0, 16), (16, 32)]
    assert plan.stage_split(4, 1) == [(0, 4)]


@pytest.mark.slow  # four CLI processes: ~15 s each at a load of 30 on 2 cores
def test_the_cli_builds_fsdp2_on_meta_and_exits_2_naming_what_does_not_fit(tmp_path):
    r = trainbench("plan", "nlp/llama31_8b", "--backend", "torch", "--world", "8", "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["ok"] and got["plan"]["method"].startswith("built: FSDP2 fully_shard")  # FSDP2's own shards
    assert got["plan"]["mapping"].startswith("fsdp=8 -> FSDP2 over 8 ranks")
    r = trainbench("plan", "nlp/deepseekv3_671b", "--backend", "megatron", "--world", "256", timeout=300)
    assert r.returncode == 2
    assert "more than the 80 GB of the device (--device-memory-gb)" in " ".join(r.stderr.split())
    assert "one rank of each stage" in r.stdout and "47-60" in r.stdout  # what was laid out is still shown
    r = trainbench("plan", "nlp/no_such", "--backend", "torch", timeout=120)
    assert r.returncode == 2 and "no_such" in r.stderr
    r = trainbench("plan", "--help", timeout=120)
    assert r.returncode == 0 and "meta tensors under a fake process group" in " ".join(r.stdout.split())


# ---- a CPU-sized plan against torch's own count (tests/measure/test_llm_memory.py's measured step) ----------


def test_a_cpu_sized_plan_is_within_ten_percent_of_memtracker():
    from support.plan_memtrack import case_spec

    got = in_fresh_process("support.plan_memtrack", "measured()")
    p = plan.plan(case_spec(), "torch", 1, 10**12, meta=False)
    assert abs(p.peak_bytes / got - 1) <= 0.10, (p.peak_bytes, got, p.stages[0])


def test_fsdp2s_own_shards_of_deepseek_v3_equal_the_arithmetic():
    """FSDP2's `fully_shard` of each DeepSeek-V3 layer kind over 64 of 256 fake ranks (a fresh process: the fake
    process group cannot open beside one a test left open) holds what the plan's arithmetic says, padding aside."""
    import subprocess
    import sys

    from support.backend_util import ROOT, env

    code = ("import json; from suite.plan.meta import fsdp_local_params; from suite.models.llama import model as llama; "
            "from suite import registry; from suite.specload import load_spec; "
            "s = load_spec(registry.workload_files()['nlp/deepseekv3_671b']); "
            "c = llama.Config.model_validate(s.model.params()); "
            "print(json.dumps(fsdp_local_params(c, 129280, 256, 64, 'bf16')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    built = json.loads(done.stdout.strip().splitlines()[-1])
    d = spec("nlp/deepseekv3_671b")
    cfg = __import__("suite.models.llama.model", fromlist=["Config"]).Config.model_validate(d.model.params())
    dense, experts = llm_memory.layer_params(cfg, cfg.n_layer - 1)
    assert built["moe_layer"] == pytest.approx((dense + experts) / 64, rel=1e-3)
    assert built["dense_layer"] == pytest.approx(sum(llm_memory.layer_params(cfg, 0)) / 64, rel=1e-3)
    assert built["embedding"] == 129280 * cfg.d_model // 64

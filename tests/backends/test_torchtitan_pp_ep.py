"""DeepSeek-V3's layout under torchtitan: its own pipeline (pipeline_llm) with its own expert parallelism (EP carved
out of its FSDP dimension, tokens exchanged all-to-all by its AllToAllTokenDispatcher, the experts sharded by its
Qwen3 plan for a GQA decoder with MoE layers: suite/backends/torchtitan/model.py) and activation checkpointing, on
four gloo ranks as pp=2 x ep=2, against torchtitan on one process.

The reference is torchtitan's own one-process run, not the torch backend's: torchtitan's DeepSeekV3Model has no
load-balancing aux loss (the suite's MoE adds MLPerf's 0.01; tests/backends/test_backend_torchtitan.py compares
their logits), and its GroupedExperts casts tokens and expert weights to bf16 always, so under ep, where each
grouped matmul sees both ranks' tokens, the gap is bf16 rounding of other token groups: seen 1.0e-2 over 20 steps
(eval 1.9e-2) against a torchtitan reordering's 2.9e-3. The parity runs therefore compute the experts in fp32
(tests/support/pp_curves.py `titan_fp32_experts`: the `.bfloat16()` casts inside GroupedExperts made the identity,
nothing else changed), the reference and its four reorderings alike, and the bound is the one the other layout
tests use (tests/support/noise.py, SAME_MATH: the same arithmetic in another order).
Also fsdp=2 x ep=2 without the pipeline (torchtitan's dp_shard 4, its experts FSDP-sharded over efsdp 2).
Seen (AMD EPYC Zen 5, 2 cores, load 8-18): pp=2 x ep=2, with and without ac=full, 1.2e-6 (eval 1.9e-6) from one
process (4.8e-7, eval 7.2e-7, bound 1.0e-5 with the gradient clipped at 0.1); fsdp=2 x ep=2 7.2e-7; ep=2 alone 1.2e-6; pp=2 alone, bf16 experts, bit-identical; bound 9.7e-6. The negative control: torchtitan's split with the first stage one layer short. And the
recipe: `nlp/deepseekv3_671b --variant tiny --backend torchtitan` trains from the CLI as pp=2 x ep=2 x ac=full.
"""

from __future__ import annotations

import json
import math

import pytest
from support.backend_util import ROOT, json_rows, trainbench
from support.noise import SAME_MATH, measure
from support.pp_curves import titan_fp32_experts
from support.promised import require
from test_layouts import LAUNCH_GUARD_S, LAUNCH_TEST_TIMEOUT_S, STEPS
from test_layouts_pp import DEEPSEEK, TINY_MOE, _launch, eval_gap, gap, within

from suite.backends.torchtitan import backend as titan_backend
from suite.specload import load_spec

BY_4 = {**DEEPSEEK, "data.micro_batch_size": 4}  # each ep rank's 8 samples pipelined as 2 x 4; the reference 4 x 4
# The gradient clipped tight (the tiny model's norm is ~1-3), so every update depends on the norm torchtitan joins
# over the pp stages and the ep and dense meshes (clip_grad_norm_'s ep_enabled: without it the recipe's own clip
# failed under pp x ep)
CLIP = {"grad_clip": 0.1}


def test_deepseek_v3s_layout_is_taken_and_what_is_not_wired_is_refused():
    ok = [{"parallel.pp": 2, "parallel.ep": 2}, {"parallel.pp": 2, "parallel.ep": 2, "parallel.ac": "full"},
          {"parallel.ep": 2}, {"parallel.pp": 2, "parallel.ac": "selective"}]
    for sets in ok:
        assert titan_backend.supports(load_spec(TINY_MOE, {**DEEPSEEK, **sets})) is None, sets
    assert titan_backend.supports(load_spec(ROOT / "workloads" / "nlp" / "deepseekv3_671b.yaml")) is None  # pp, ep, ac
    for sets, message in [
        ({"parallel.pp": 2, "parallel.ep": 2, "parallel.fsdp": 2}, "its composition with dp/fsdp/tp is not tested"),
        ({"parallel.pp": 2, "parallel.dp": 2}, "its composition with dp/fsdp/tp is not tested"),
        ({"parallel.ep": 2, "model.preset": "llama3.1-tiny"}, "on a dense model"),
        # its pipeline's stages are not mapped to whole-model names for a checkpoint (the torch backend's are)
        ({"parallel.pp": 2, "parallel.ep": 2, "checkpoint.every_steps": 10}, "checkpoint with parallel.pp"),
    ]:
        assert message in (titan_backend.supports(load_spec(TINY_MOE, {**DEEPSEEK, **sets})) or ""), sets


@pytest.fixture(scope="module")
def titan_reference():
    require("torchtitan.models.llama3", extra="torchtitan")
    with titan_fp32_experts(True):
        return measure(TINY_MOE, STEPS, overrides=BY_4, permute_block=4, backend="torchtitan", options=CLIP)


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TEST_TIMEOUT_S)
def test_pp_with_ep_and_ac_under_torchtitan_matches_one_process(titan_reference, tmp_path):
    jobs = [{"backend": "torchtitan", "fp32_experts": True, "options": CLIP,
             "overrides": {**BY_4, "parallel.pp": 2, "parallel.ep": 2, **extra}}
            for extra in ({}, {"parallel.ac": "full"})]
    jobs.append({**jobs[0], "fault": "titan_boundary"})  # a layer in no stage
    # without the pipeline: fsdp=2 x ep=2 (torchtitan's dp_shard 4, its experts FSDP-sharded over efsdp = 4 / 2)
    jobs.append({"backend": "torchtitan", "fp32_experts": True, "options": CLIP,
                 "overrides": {**BY_4, "data.micro_batch_size": 2, "parallel.fsdp": 2, "parallel.ep": 2}})
    rows = _launch(tmp_path, 4, TINY_MOE, jobs)
    want, _, noise = titan_reference
    print("torchtitan pp x ep:", {r.get("fault", "") + str(r["overrides"].get("parallel.ac", ""))
                                  + ("fsdp" if "parallel.fsdp" in r["overrides"] else ""):
                                  f"{gap(r['losses'], want):.1e} eval {eval_gap(r, titan_reference):.1e}" for r in rows},
          f"bound {noise.tol(SAME_MATH):.1e}")
    for row, ac in zip(rows[:2], ("none", "full"), strict=True):
        assert {k: row["layout"][k] for k in ("framework", "pp", "ep", "dp", "micro_batch_size", "micro_batches",
                                              "activation_checkpointing")} == {
            "framework": "torchtitan", "pp": 2, "ep": 2, "dp": 1, "micro_batch_size": 4, "micro_batches": 2,
            "activation_checkpointing": ac}
        assert row["layout"]["torchtitan_mesh"] == {"dp_shard": 2, "ep": 2}  # the mapping, recorded
        assert within(row, titan_reference), (f"ac={ac}: gap {gap(row['losses'], want):.2e}, eval gap "
                                              f"{eval_gap(row, titan_reference):.2e} ({noise})")
    assert {k: rows[3]["layout"][k] for k in ("fsdp", "ep", "micro_batch_size", "micro_batches")} == {
        "fsdp": 2, "ep": 2, "micro_batch_size": 2, "micro_batches": 2}
    assert rows[3]["layout"]["torchtitan_mesh"] == {"dp_shard": 4, "ep": 2}
    assert within(rows[3], titan_reference), (f"fsdp x ep: gap {gap(rows[3]['losses'], want):.2e}, eval gap "
                                              f"{eval_gap(rows[3], titan_reference):.2e} ({noise})")
    assert not within(rows[2], titan_reference), f"a layer in no stage: inside the tolerance ({noise})"
    assert gap(rows[2]["losses"], want) > 100 * noise.tol(SAME_MATH)


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_GUARD_S)
def test_the_tiny_deepseek_v3_recipe_trains_under_torchtitan_with_pp_and_ep_from_the_cli(tmp_path):
    """The recipe's tiny variant, unchanged but for the layout and micro-batch the four ranks need (as the torch
    backend's test in test_layouts_pp.py runs it), through `trainbench run --backend torchtitan`."""
    require("torchtitan.models.llama3", extra="torchtitan")
    data = tmp_path / "data"
    prep = trainbench("data", "prepare", "megatron_indexed", "--synthetic", TRAINBENCH_DATA=str(data))
    assert prep.returncode == 0, prep.stderr
    p = trainbench("run", "nlp/deepseekv3_671b", "--variant", "tiny", "--backend", "torchtitan", "--nproc", "4",
                   "--parallel", "pp=2,ep=2,ac=full", "--set", "data.micro_batch_size=1", "--results",
                   str(tmp_path / "results"), "--json", TRAINBENCH_DATA=str(data), timeout=LAUNCH_GUARD_S - 60)
    assert p.returncode == 0, p.stderr[-3000:]
    (row,) = json_rows(p.stdout)
    assert row["backend"] == "torchtitan" and row["status"] == "budget" and row["steps"] == 6, row
    written = json.loads(next(q for q in (tmp_path / "results").rglob("*.json") if ".index" not in q.parts
                              and "deepseekv3_671b" in str(q)).read_text())
    assert {k: written["parallel"][k] for k in ("pp", "ep", "ac", "micro_batches", "framework", "torchtitan_mesh")} == {
        "pp": 2, "ep": 2, "ac": "full", "micro_batches": 2, "framework": "torchtitan",
        "torchtitan_mesh": {"dp_shard": 2, "ep": 2}}
    assert all(math.isfinite(e["metrics"]["val_loss"]) for e in written["eval_curve"])

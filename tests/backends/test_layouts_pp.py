"""Pipeline parallelism of the Llama decoder, dense and Mixture-of-Experts (`--parallel pp=2[,ep=2]`, schedules
gpipe, 1f1b and interleaved; suite/backends/parallel/pipeline_llama.py), and Megatron's uneven stages, against one
process; and torchtitan's own pipeline (pipeline_llm, suite/backends/torchtitan/pipeline.py) with the workload's loss.

The loss curves of 20 steps and the evaluation after them, as tests/backends/test_layouts.py and
test_layouts_ep.py do, with the tolerance measured first (tests/support/noise.py: `SAME_MATH` x the Student-t
bound from four reorderings of the reference's arithmetic; `OTHER_KERNELS` x for Megatron). Dense: the 4-layer
llama3.1-tiny (interleaved holds two 1-layer stages per rank). MoE: DeepSeek-V3's tiny shape under pp=2 x ep=2 on
four ranks against one process cut into the micro-batches the ranks hold (each ep rank 8 of the 16 samples,
pipelined as 2 x 4: the reference's micro-batch is 4), its noise from reorderings inside each micro-batch (a
load-balancing loss is per micro-batch, as in test_layouts_ep.py). Megatron: DeepSeek-V3's tiny shape under pp=2 x
ep=2 too (its sigmoid router, its 3 layers split unevenly as 2 + 1).
Negative controls, run through the same launch and the same bound (tests/support/pp_curves.py injects them):
a stage boundary off by one layer, and the loss on the wrong stage; each must fall outside the tolerance.
And the recipe itself: `nlp/deepseekv3_671b --variant tiny` trains from the CLI with pp=2 x ep=2.
Seen (AMD EPYC Zen 5, 2 cores, load 25-70), largest gap over 20 steps: torch's schedules 7.2e-7, with full AC the
same, torchtitan's 2.4e-6; pp=2 x ep=2 torch 1.4e-6 and Megatron 1.4e-6 (before its pp x dp fix: 1.1e-1); against
bounds of 2.4e-5 (dense) and 2.0e-5 (MoE). The faults: boundary 5.8e-2, wrong-stage loss 1.1e-1. pp=2 x ep=2 with
ac=full and with ac=selective (DeepSeek-V3's own layout shape) 1.4e-6 each (load 9); the aux loss counted twice 1.7e-2.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from support.backend_util import ROOT, TESTS, env, json_rows, trainbench
from support.noise import OTHER_KERNELS, SAME_MATH, Noise, measure
from support.promised import require
from test_layouts import LAUNCH_GUARD_S, LAUNCH_TEST_TIMEOUT_S, STEPS

from suite.backends.megatron import llama as megatron_llama
from suite.backends.megatron import llama_refusals as llama_refusals
from suite.backends.parallel import pipeline_llama
from suite.backends.torch import backend as torch_backend
from suite.specload import load_spec

torch.set_num_threads(1)

TINY_LLAMA = TESTS / "support" / "specs" / "tiny_llama.yaml"  # llama3.1-tiny, batch 16
TINY_MOE = TESTS / "support" / "specs" / "tiny_moe.yaml"  # gpt-oss-tiny: 2 layers, 8 experts, top-2; batch 16
FOUR_LAYERS = {"model.n_layer": 4}
# DeepSeek-V3's tiny shape on the test text: 3 layers (the first dense), 16 experts in 4 groups, sigmoid scores with
# a score bias, top-4 of the best 2 groups, one shared expert; under pp=2 its stages hold 2 and 1 layers
DEEPSEEK = {"model.preset": "deepseek-v3-tiny"}


def gap(got: list[float], want: list[float]) -> float:
    assert len(got) == len(want) == STEPS
    assert want[-1] < want[0] - 0.5  # learning curves, not flat lines that trivially agree
    return max(abs(a - b) for a, b in zip(got, want, strict=True))


def eval_gap(row: dict, reference: tuple[list[float], dict[int, dict], Noise]) -> float:
    return abs(row["evals"][str(STEPS)]["val_loss"] - reference[1][STEPS]["val_loss"])


def within(row: dict, reference: tuple[list[float], dict[int, dict], Noise], factor: float = SAME_MATH) -> bool:
    want, _, noise = reference
    tol = noise.tol(factor)
    return gap(row["losses"], want) <= tol and eval_gap(row, reference) <= max(noise.eval_tol(STEPS, factor), tol)


def _launch(tmp_path, nproc: int, spec, jobs: list[dict]) -> list[dict]:
    out = tmp_path / f"pp-{nproc}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           "-m", "support.pp_curves", str(out), str(spec), str(STEPS), *(json.dumps(j) for j in jobs)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=LAUNCH_GUARD_S)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(out.read_text())


# ---- the split and the refusals, before anything starts -------------------------------------------------------


def test_stage_bounds_even_remainder_first_and_megatron_uneven():
    assert pipeline_llama.stage_bounds(4, 2) == [range(0, 2), range(2, 4)]
    assert [len(r) for r in pipeline_llama.stage_bounds(61, 4)] == [16, 15, 15, 15]  # DeepSeek-V3's 61 layers
    # Megatron-core's num_layers_in_first/last_pipeline_stage: 61 = 3 + 14 x 4 + 2 over 16 stages
    uneven = pipeline_llama.stage_bounds(61, 16, first=3, last=2)
    assert [len(r) for r in uneven] == [3] + [4] * 14 + [2]
    assert uneven[0].start == 0 and uneven[-1].stop == 61
    assert all(a.stop == b.start for a, b in zip(uneven, uneven[1:], strict=False))  # none skipped or run twice
    with pytest.raises(ValueError, match="do not split evenly over the 14 stages"):
        pipeline_llama.stage_bounds(61, 16, first=4, last=2)
    with pytest.raises(ValueError, match="each stage needs at least one layer"):
        pipeline_llama.stage_bounds(2, 4)


def test_megatron_first_and_last_stage_sizes_where_pp_does_not_divide_the_layers():
    assert llama_refusals.uneven_split(64, 4) is None  # even: Megatron's own split
    assert llama_refusals.uneven_split(61, 16) == (3, 2)  # 3 + 14 x 4 + 2
    assert [len(megatron_llama.stage_layers(61, 4, s)) for s in range(4)] == [15, 16, 16, 14]
    assert llama_refusals.uneven_split(5, 4) == (2, 1)  # the ceiling would leave the last stage none
    assert sum(len(megatron_llama.stage_layers(61, 16, s)) for s in range(16)) == 61
    from suite.backends.megatron import backend as megatron

    assert megatron.supports(load_spec(TINY_LLAMA, {"parallel.pp": 2, "model.n_layer": 3})) is None  # 2 + 1
    assert "no uneven split" in megatron.supports(load_spec(TINY_LLAMA, {"parallel.pp": 3}))  # 3 stages, 2 layers
    assert megatron.supports(load_spec(TINY_MOE, {**DEEPSEEK, "parallel.pp": 2, "parallel.ep": 2})) is None
    assert "virtual pipeline stages are not wired" in megatron.supports(
        load_spec(TINY_LLAMA, {**FOUR_LAYERS, "parallel.pp": 2, "parallel.schedule": "interleaved"}))


def test_the_torch_backend_takes_pipelined_llamas_and_refuses_what_it_does_not_wire():
    ok = [(TINY_LLAMA, {"parallel.pp": 2}), (TINY_LLAMA, {"parallel.pp": 2, "parallel.schedule": "gpipe"}),
          (TINY_LLAMA, {**FOUR_LAYERS, "parallel.pp": 2, "parallel.schedule": "interleaved"}),
          (TINY_MOE, {"parallel.pp": 2, "parallel.ep": 2}), (TINY_LLAMA, {"parallel.pp": 2, "parallel.dp": 2}),
          (TINY_MOE, {**DEEPSEEK, "parallel.pp": 2, "parallel.ep": 2, "parallel.ac": "full"})]
    for spec, sets in ok:
        assert torch_backend.supports(load_spec(spec, sets)) is None, sets
    for spec, sets, message in [
        (TINY_LLAMA, {"parallel.pp": 2, "parallel.schedule": "interleaved"}, "4 stages, more than model.n_layer=2"),
        (TINY_LLAMA, {"parallel.pp": 2, "parallel.tp": 2}, "with tp/fsdp/cp on the Llama decoder is not implemented"),
        (TINY_MOE, {"parallel.pp": 2, "parallel.ep": 2, "parallel.fsdp": 2}, "is not implemented"),
        (TINY_LLAMA, {"parallel.pp": 2, "model.tie_embeddings": True}, "tied embedding"),
        (TESTS / "support" / "specs" / "char_gpt.yaml", {"parallel.pp": 2, "parallel.schedule": "interleaved"},
         "interleaved is wired for the Llama decoder"),
    ]:
        assert message in (torch_backend.supports(load_spec(spec, sets)) or ""), (sets, message)


# ---- 20 steps against one process -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dense():
    return measure(TINY_LLAMA, STEPS, overrides=FOUR_LAYERS)


@pytest.fixture(scope="module")
def deepseek_by_4():
    return measure(TINY_MOE, STEPS, overrides={**DEEPSEEK, "data.micro_batch_size": 4}, permute_block=4)


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TEST_TIMEOUT_S)
def test_every_schedule_matches_one_process_and_the_faults_do_not(dense, tmp_path):
    require("torchtitan.models.llama3", extra="torchtitan")
    schedules = ("gpipe", "1f1b", "interleaved")
    jobs = [{"backend": "torch", "overrides": {**FOUR_LAYERS, "parallel.pp": 2, "parallel.schedule": s}}
            for s in schedules]
    jobs += [{"backend": "torch", "overrides": {**FOUR_LAYERS, "parallel.pp": 2}, "fault": f}
             for f in ("boundary", "loss_stage")]
    # torchtitan's own pipeline_llm on its Llama 3 model, the workload's loss on its last stage
    jobs += [{"backend": "torchtitan", "overrides": {**FOUR_LAYERS, "parallel.pp": 2, "parallel.schedule": s}}
             for s in ("1f1b", "interleaved")]
    # full activation checkpointing inside each stage (recomputes the same ops)
    jobs += [{"backend": "torch", "overrides": {**FOUR_LAYERS, "parallel.pp": 2, "parallel.ac": "full"}}]
    rows = _launch(tmp_path, 2, TINY_LLAMA, jobs)
    want, _, noise = dense
    for schedule, row in zip(schedules, rows[:3], strict=True):
        assert (row["layout"]["pp"], row["layout"]["schedule"], row["layout"]["micro_batches"]) == (2, schedule, 2)
        assert within(row, dense), (f"{schedule}: gap {gap(row['losses'], want):.2e}, eval gap "
                                    f"{eval_gap(row, dense):.2e} ({noise})")
    print("pp schedules:", {f"{r['backend']} {r.get('fault') or r['overrides']['parallel.schedule']}":
                            f"{gap(r['losses'], want):.1e}" for r in rows[:7]}, f"bound {noise.tol(SAME_MATH):.1e}")
    for row in rows[3:5]:  # the negative controls: far outside the same bound
        assert not within(row, dense), f"{row['fault']}: inside the tolerance ({noise})"
        assert gap(row["losses"], want) > 100 * noise.tol(SAME_MATH), row["fault"]
    assert rows[7]["layout"]["activation_checkpointing"] == "full" and within(rows[7], dense)
    for row in rows[5:7]:  # torchtitan's model code (its complex-number rotary embedding): other kernels
        schedule = row["overrides"]["parallel.schedule"]
        assert (row["layout"]["framework"], row["layout"]["pp"], row["layout"]["schedule"]) == ("torchtitan", 2, schedule)
        assert within(row, dense, OTHER_KERNELS), (f"torchtitan {schedule}: gap {gap(row['losses'], want):.2e}, "
                                                   f"eval gap {eval_gap(row, dense):.2e} ({noise})")


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TEST_TIMEOUT_S)
def test_pp_with_ep_on_four_processes_matches_one_process(deepseek_by_4, tmp_path):
    """torch's pipeline with its expert exchange, and Megatron's (its sigmoid group-limited router, its uneven
    split of the 3 layers as 2 + 1, its all-gather dispatcher on CPU), against the same one-process reference."""
    require("megatron.core")
    assert llama_refusals.uneven_split(3, 2) == (2, 1)  # Megatron's first/last stage sizes: its layers 2 + 1
    jobs = [{"backend": b, "overrides": {**DEEPSEEK, "parallel.pp": 2, "parallel.ep": 2}} for b in ("torch", "megatron")]
    rows = _launch(tmp_path, 4, TINY_MOE, jobs)
    want, _, noise = deepseek_by_4
    for row, factor in zip(rows, (SAME_MATH, OTHER_KERNELS), strict=True):
        assert {k: row["layout"][k] for k in ("pp", "ep", "dp", "micro_batch_size", "micro_batches")} == {
            "pp": 2, "ep": 2, "dp": 1, "micro_batch_size": 4, "micro_batches": 2}
        print(f"pp x ep {row['backend']}: gap {gap(row['losses'], want):.1e}, eval {eval_gap(row, deepseek_by_4):.1e}, "
              f"bound {noise.tol(factor):.1e}")
        assert within(row, deepseek_by_4, factor), (f"{row['backend']}: gap {gap(row['losses'], want):.2e}, eval gap "
                                                    f"{eval_gap(row, deepseek_by_4):.2e} ({noise})")


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TEST_TIMEOUT_S)
def test_pp_with_ep_and_activation_checkpointing_matches_one_process(deepseek_by_4, tmp_path):
    """DeepSeek-V3's layout `{pp, ep, ac}` at its tiny size: every stage's layers checkpointed (their expert exchange
    re-run in backward), full and selective, against the same one-process reference; the negative control counts
    each MoE layer's load-balancing loss twice (what a recompute that attached it again would do). The aux loss
    rides on the layer's output (moe._AttachAuxLoss), and the non-reentrant recompute only refills saved tensors:
    its own graph is never back-propagated, so the balancing gradient arrives once."""
    jobs = [{"backend": "torch", "overrides": {**DEEPSEEK, "parallel.pp": 2, "parallel.ep": 2, "parallel.ac": ac}}
            for ac in ("full", "selective")]
    jobs += [{**jobs[0], "fault": "aux_twice"}, {**jobs[0], "overrides": {**jobs[0]["overrides"], "parallel.ac": "none"}}]
    rows = _launch(tmp_path, 4, TINY_MOE, jobs)
    want, _, noise = deepseek_by_4
    print("pp x ep x ac:", {r.get("fault") or r["overrides"]["parallel.ac"]: f"{gap(r['losses'], want):.1e}"
                            for r in rows}, f"bound {noise.tol(SAME_MATH):.1e}",
          "expert exchanges:", [r["expert_shard_calls"] for r in rows])
    for row, ac in zip(rows[:2], ("full", "selective"), strict=True):
        assert {k: row["layout"][k] for k in ("pp", "ep", "activation_checkpointing")} == {
            "pp": 2, "ep": 2, "activation_checkpointing": ac}
        assert within(row, deepseek_by_4), (f"ac={ac}: gap {gap(row['losses'], want):.2e}, eval gap "
                                            f"{eval_gap(row, deepseek_by_4):.2e} ({noise})")
    assert not within(rows[2], deepseek_by_4), f"aux loss counted twice: inside the tolerance ({noise})"
    # the layers really re-ran: rank 0's stage (layers 0-1, one MoE) did its expert exchange again in backward, once
    # per micro-batch (2) and step, beyond what the run without checkpointing did
    for row in rows[:2]:
        assert row["expert_shard_calls"] - rows[3]["expert_shard_calls"] == 2 * STEPS, row["expert_shard_calls"]


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_GUARD_S)
def test_the_tiny_deepseek_v3_recipe_trains_with_pp_and_ep_from_the_cli(tmp_path):
    """The recipe's tiny variant on the synthetic stand-in of its data, four processes as pp=2 x ep=2 (its batch of 4
    is 2 per ep rank: micro-batches of 1 give the 1F1B schedule its 2)."""
    data = tmp_path / "data"
    prep = trainbench("data", "prepare", "megatron_indexed", "--synthetic", TRAINBENCH_DATA=str(data))
    assert prep.returncode == 0, prep.stderr
    p = trainbench("run", "nlp/deepseekv3_671b", "--variant", "tiny", "--nproc", "4", "--parallel", "pp=2,ep=2",
                   "--set", "data.micro_batch_size=1", "--results", str(tmp_path / "results"), "--json",
                   TRAINBENCH_DATA=str(data), timeout=LAUNCH_GUARD_S - 60)
    assert p.returncode == 0, p.stderr[-3000:]
    (row,) = json_rows(p.stdout)
    assert row["backend"] == "torch" and row["status"] == "budget" and row["steps"] == 6, row
    written = json.loads(next(q for q in (tmp_path / "results").rglob("*.json") if ".index" not in q.parts
                              and "deepseekv3_671b" in str(q)).read_text())
    assert {k: written["parallel"][k] for k in ("pp", "ep", "schedule", "micro_batches")} == {
        "pp": 2, "ep": 2, "schedule": "1f1b", "micro_batches": 2}
    assert all(torch.isfinite(torch.tensor(e["metrics"]["val_loss"])) for e in written["eval_curve"])

"""Expert parallelism (`--parallel ep=N`, suite/backends/parallel/expert.py) and the LLM decoder under the other
backends' layouts: each against one process.

Exact first: one step's gradients of every parameter under ep=2 x fsdp=2 with micro-batches and ep=2 x dp=2 with
gradient clipping equal one process's to fp32 rounding (tests/support/ep_grads.py; seen <= 7e-7 relative). That check
found the bug the curves alone would have hidden: with fsdp=1, torch 2.13's FSDP2 divided the expert gradients
twice (1/ep of one process's; the relative error was 0.75 at ep=4), which AdamW, nearly blind to a gradient's
scale, turned into a curve gap of only 5e-3 over 20 steps.

Then the loss curves of 20 steps, as tests/backends/test_layouts.py does, with tolerances from a noise scale
measured first (tests/support/noise.py). The MoE reference is one process cut into the micro-batches that the
layout's ranks hold (ep=2: 2 x 8, ep=2 x fsdp=2: 4 x 4 of the batch of 16): each rank's load-balancing loss covers
its own tokens, as each micro-batch's does (Megatron's too), so the two compute the same sums in another order.
Its noise comes from reorderings that keep every sample in its micro-batch (`permute_block`); reorderings across
them would change which tokens share a load-balancing loss, a different loss, not rounding. Seen on the 2-core
Intel Xeon: noise 4.8e-7 to 9.5e-7 (one or two fp32 ulps of the loss), ep layouts 2.4e-7 over 20 steps; DeepSpeed
ZeRO-3 on the dense Llama 1.5e-5 against a noise of 2.2e-5; another seed's curve 0.24 away.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from support.backend_util import ROOT, TESTS, env, trainbench
from support.curves import loss_curve
from support.noise import OTHER_KERNELS, SAME_MATH, Noise, measure
from test_layouts import LAUNCH_GUARD_S, LAUNCH_TEST_TIMEOUT_S, STEPS

from suite.backends import layout
from suite.backends.parallel import refusals as refusals
from suite.specload import load_spec

torch.set_num_threads(1)

TINY_MOE = TESTS / "support" / "specs" / "tiny_moe.yaml"  # gpt-oss-tiny: 8 experts, top-2; batch 16
TINY_LLAMA = TESTS / "support" / "specs" / "tiny_llama.yaml"
EVAL_AT: tuple[int, ...] = ()  # the evaluation after step 20 only: cheaper (measure() re-runs to each EVAL_AT step)


def gap(got: list[float], want: list[float]) -> float:
    assert len(got) == len(want) == STEPS
    assert want[-1] < want[0] - 0.5  # learning curves, not flat lines that trivially agree
    return max(abs(a - b) for a, b in zip(got, want, strict=True))


@pytest.fixture(scope="module")
def moe_by_2() -> tuple[list[float], dict[int, dict], Noise]:
    return measure(TINY_MOE, STEPS, eval_at=EVAL_AT, overrides={"data.micro_batch_size": 8}, permute_block=8)


@pytest.fixture(scope="module")
def moe_by_4(moe_by_2):
    """The 4 x 4 reference curve with the noise scale measured on the 2 x 8 one (the same model, data and kind of
    reordering; seen 4.8e-7 for 4 x 4 and 9.5e-7 for 2 x 8): four fewer runs of the slowest reference."""
    want = loss_curve(TINY_MOE, "torch", STEPS, overrides={"data.micro_batch_size": 4}, eval_at=EVAL_AT)
    return want, dict(loss_curve.last_evals), moe_by_2[2]  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def dense():
    return measure(TINY_LLAMA, STEPS, eval_at=EVAL_AT)


def _launch(tmp_path, nproc: int, module: str, spec, args: list[str]) -> list[dict]:
    out = tmp_path / f"{module}-{nproc}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           "-m", f"support.{module}", str(out), str(spec), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=LAUNCH_GUARD_S)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(out.read_text())


def _agree(row: dict, reference: tuple[list[float], dict[int, dict], Noise], factor: float = SAME_MATH) -> None:
    want, want_evals, noise = reference
    what = f"{row['backend']} {row.get('overrides')} {row.get('options')}"
    assert gap(row["losses"], want) <= noise.tol(factor), f"{what}: {row['losses']} vs {want} ({noise})"
    for step in (*EVAL_AT, STEPS):
        got, ref = row["evals"][str(step)]["val_loss"], want_evals[step]["val_loss"]
        # an evaluation's noise can be 0 (every reordering gave the same bits): no tighter than the curve's
        tol = max(noise.eval_tol(step, factor), noise.tol(factor))
        assert abs(got - ref) <= tol, f"{what}: val_loss after step {step} {got} vs one process {ref} ({noise})"


# ---- the flag, the product rule, refusals before anything starts ----------------------------------------------


def test_ep_is_a_layout_dimension_that_reads_different_data():
    assert layout.parse_flag("ep=2,fsdp=2") == {"parallel.ep": 2, "parallel.fsdp": 2}
    lay = layout.resolve(load_spec(TINY_MOE, {"parallel.ep": 2}).parallel, 4)
    assert (lay.dp, lay.ep, lay.world, lay.data_parallel) == (2, 2, 4, 4)
    assert layout.micro_batches(load_spec(TINY_MOE), layout.Layout(ep=2, fsdp=2)) == (4, 1)
    assert "multiply to 4, not the 2 processes" in layout.check(
        load_spec(TINY_MOE, {"parallel.ep": 2, "parallel.fsdp": 2, "parallel.dp": 1}), 2)
    assert "ep" not in layout.Layout(dp=2).record()  # results without EP keep their comparison key
    assert layout.Layout(ep=2).record()["ep"] == 2 and layout.Layout(ep=2).describe().endswith(",ep=2")


@pytest.mark.parametrize(("spec", "sets", "message"), [
    (TINY_MOE, {"parallel.ep": 3}, "--parallel ep=3 does not divide model.moe.experts=8"),
    (TINY_LLAMA, {"parallel.ep": 2}, "--parallel ep=2: this model is dense"),
    (TESTS / "support" / "specs" / "char_gpt.yaml", {"parallel.ep": 2}, "--parallel ep=2: expert parallelism splits"),
    (TINY_MOE, {"parallel.ep": 2, "parallel.tp": 2}, "--parallel ep=2 with tp/pp/cp is not implemented"),
    (TINY_MOE, {"parallel.ep": 2, "parallel.ac": "full"}, "--parallel ep=2 with ac=full is implemented under pp"),
])
def test_impossible_expert_layouts_are_refused_naming_the_flag(spec, sets, message):
    assert message in refusals.expert_refusal(load_spec(spec, sets))


def test_the_cli_refuses_ep_that_does_not_divide_the_experts_before_starting(tmp_path):
    p = trainbench("run", str(TINY_MOE), "--nproc", "3", "--parallel", "ep=3", "--set", "data.batch_size=24",
                   "--results", str(tmp_path), timeout=300)
    assert p.returncode == 2, p.stderr
    text = " ".join(p.stderr.split())
    assert "--parallel ep=3 does not divide model.moe.experts=8" in text and "init" not in text
    assert not list(tmp_path.rglob("*.json"))


def test_megatron_runs_the_llama_with_ep_and_refuses_what_it_does_not_map():
    from suite.backends.megatron import options as megatron_options

    assert megatron_options.supports(load_spec(TINY_MOE, {"parallel.ep": 2})) is None
    assert megatron_options.supports(load_spec(TINY_LLAMA)) is None
    assert megatron_options.supports(load_spec(TINY_MOE, {"model.attention_bias": True})) is None  # add_bias_linear
    for spec, sets, message in [
        (TINY_MOE, {"parallel.ep": 3}, "--parallel ep=3 does not divide model.moe.experts=8"),
        (TINY_LLAMA, {"parallel.ep": 2}, "--parallel ep=2: this model is dense"),
        (TINY_MOE, {"parallel.tp": 2}, "parallel.tp=2 with model.moe"),
        (TINY_MOE, {"model.moe.normalize_top_k": False}, "normalize_top_k=false"),
        (TESTS / "support" / "specs" / "char_gpt.yaml", {"parallel.ep": 2}, "expert parallelism needs a Mixture-of-Experts"),
    ]:
        assert message in (megatron_options.supports(load_spec(spec, sets)) or ""), (sets, message)


def test_deepspeed_refuses_ep():
    from suite.backends.deepspeed import backend as deepspeed

    assert "--parallel ep=2" in deepspeed.supports(load_spec(TINY_MOE, {"parallel.ep": 2}))


# ---- exact: one step's gradients --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_GUARD_S + 60)
def test_expert_parallel_gradients_equal_one_process(tmp_path):
    # ep x fsdp with micro-batches (gradient sync on the last only); ep x dp (the experts' HSDP over dp, fsdp=1)
    # with gradient clipping (the norm over dense and expert gradients, which live on different meshes)
    layouts = [{"parallel.ep": 2, "parallel.fsdp": 2, "data.micro_batch_size": 2},
               {"parallel.ep": 2, "grad_clip": 0.05}]
    rows = _launch(tmp_path, 4, "ep_grads", TINY_MOE, [json.dumps(o) for o in layouts])
    for row in rows:
        assert row["world"] == 4
        worst = max(row["worst"], key=row["worst"].get)
        assert row["worst"][worst] < 1e-5, f"{row['overrides']}: {worst} off by {row['worst'][worst]:.1e} (relative)"
        assert any(".moe.experts.w" in n for n in row["worst"])
    assert rows[0]["micro_batches"] == 2
    assert rows[1]["grad_clip"] == 0.05 < rows[1]["norm"] / 10  # the clip really scales the gradients


# ---- 20 steps against one process ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TEST_TIMEOUT_S)
def test_two_process_layouts_match_one_process(moe_by_2, dense, tmp_path):
    jobs = [{"backend": "torch", "overrides": {"parallel.ep": 2}, "eval_at": list(EVAL_AT)},
            {"backend": "megatron", "overrides": {"parallel.ep": 2}, "eval_at": list(EVAL_AT)},
            {"backend": "deepspeed", "options": {"zero_stage": 3}, "spec": str(TINY_LLAMA), "eval_at": list(EVAL_AT)}]
    ep, megatron, zero3 = _launch(tmp_path, 2, "curves", TINY_MOE, [str(STEPS), *(json.dumps(j) for j in jobs)])
    for row in (ep, megatron):
        assert (row["layout"]["ep"], row["layout"]["dp"], row["layout"]["micro_batch_size"]) == (2, 1, 8)
    _agree(ep, moe_by_2)
    # Megatron's GPTModel and MoE layer (its router, aux loss, all-gather dispatcher on CPU): its own kernels
    _agree(megatron, moe_by_2, OTHER_KERNELS)
    assert (zero3["layout"]["zero_stage"], zero3["layout"]["dp"]) == (3, 2)
    _agree(zero3, dense)
    # the tolerances mean something: another seed is far outside them
    assert gap(loss_curve(TINY_MOE, "torch", STEPS, seed=1), moe_by_2[0]) > 1000 * moe_by_2[2].tol()


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TEST_TIMEOUT_S)
def test_ep_with_fsdp_on_four_processes_matches_one_process(moe_by_4, tmp_path):
    job = {"backend": "torch", "overrides": {"parallel.ep": 2, "parallel.fsdp": 2}, "eval_at": list(EVAL_AT)}
    (row,) = _launch(tmp_path, 4, "curves", TINY_MOE, [str(STEPS), json.dumps(job)])
    assert {k: row["layout"][k] for k in ("ep", "fsdp", "dp", "micro_batch_size")} == {
        "ep": 2, "fsdp": 2, "dp": 1, "micro_batch_size": 4}
    _agree(row, moe_by_4)

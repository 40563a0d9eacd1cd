"""Pipeline parallelism of the Llama decoder, dense and Mixture-of-Experts (`--parallel pp=2[,ep=2]`, schedules
gpipe, 1f1b and interleaved; suite/backends/parallel/pipeline_llama.py) against one process.

The loss curves of 20 steps and the evaluation after them, as tests/backends/test_layouts.py and
test_layouts_ep.py do, with the tolerance measured first (tests/support/noise.py: `SAME_MATH` x the Student-t
bound from four reorderings of the reference's arithmetic). Dense: the 4-layer llama3.1-tiny (interleaved holds
two 1-layer stages per rank) against one process. MoE: gpt-oss-tiny under pp=2 x ep=2 on four ranks against one
process cut into the micro-batches the ranks hold (each ep rank 8 of the 16 samples, pipelined as 2 x 4: the
reference's micro-batch is 4), its noise from reorderings inside each micro-batch (a load-balancing loss is per
micro-batch, as in test_layouts_ep.py).
Negative controls, run through the same launch and the same bound (tests/support/pp_curves.py injects them):
a stage boundary off by one layer, and the loss on the wrong stage; each must fall outside the tolerance.
Seen (AMD EPYC Zen 5, 2 cores, load 9): every schedule 0 to 5e-7 from one process over 20 steps (pp=2 x ep=2
the same); the boundary fault's curve ~0.1-0.5 away, the wrong-stage loss's ~0.5.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from support.backend_util import ROOT, TESTS, env
from support.noise import SAME_MATH, Noise, measure
from test_layouts import LAUNCH_GUARD_S, LAUNCH_TEST_TIMEOUT_S, STEPS

from suite.backends import torch as torch_backend
from suite.backends.parallel import pipeline_llama
from suite.specload import load_spec

torch.set_num_threads(1)

TINY_LLAMA = TESTS / "specs" / "tiny_llama.yaml"  # llama3.1-tiny, batch 16
TINY_MOE = TESTS / "specs" / "tiny_moe.yaml"  # gpt-oss-tiny: 2 layers, 8 experts, top-2; batch 16
FOUR_LAYERS = {"model.n_layer": 4}


def gap(got: list[float], want: list[float]) -> float:
    assert len(got) == len(want) == STEPS
    assert want[-1] < want[0] - 0.5  # learning curves, not flat lines that trivially agree
    return max(abs(a - b) for a, b in zip(got, want, strict=True))


def eval_gap(row: dict, reference: tuple[list[float], dict[int, dict], Noise]) -> float:
    return abs(row["evals"][str(STEPS)]["val_loss"] - reference[1][STEPS]["val_loss"])


def within(row: dict, reference: tuple[list[float], dict[int, dict], Noise]) -> bool:
    want, _, noise = reference
    tol = noise.tol(SAME_MATH)
    return gap(row["losses"], want) <= tol and eval_gap(row, reference) <= max(noise.eval_tol(STEPS), tol)


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


def test_the_torch_backend_takes_pipelined_llamas_and_refuses_what_it_does_not_wire():
    ok = [(TINY_LLAMA, {"parallel.pp": 2}), (TINY_LLAMA, {"parallel.pp": 2, "parallel.schedule": "gpipe"}),
          (TINY_LLAMA, {**FOUR_LAYERS, "parallel.pp": 2, "parallel.schedule": "interleaved"}),
          (TINY_MOE, {"parallel.pp": 2, "parallel.ep": 2}), (TINY_LLAMA, {"parallel.pp": 2, "parallel.dp": 2})]
    for spec, sets in ok:
        assert torch_backend.supports(load_spec(spec, sets)) is None, sets
    for spec, sets, message in [
        (TINY_LLAMA, {"parallel.pp": 2, "parallel.schedule": "interleaved"}, "4 stages, more than model.n_layer=2"),
        (TINY_LLAMA, {"parallel.pp": 2, "parallel.tp": 2}, "with tp/fsdp/cp on the Llama decoder is not implemented"),
        (TINY_MOE, {"parallel.pp": 2, "parallel.ep": 2, "parallel.fsdp": 2}, "is not implemented"),
        (TINY_LLAMA, {"parallel.pp": 2, "model.tie_embeddings": True}, "tied embedding"),
        (TESTS / "specs" / "char_gpt.yaml", {"parallel.pp": 2, "parallel.schedule": "interleaved"},
         "interleaved is wired for the Llama decoder"),
    ]:
        assert message in (torch_backend.supports(load_spec(spec, sets)) or ""), (sets, message)


# ---- 20 steps against one process -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dense():
    return measure(TINY_LLAMA, STEPS, overrides=FOUR_LAYERS)


@pytest.fixture(scope="module")
def moe_by_4():
    return measure(TINY_MOE, STEPS, overrides={"data.micro_batch_size": 4}, permute_block=4)


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TEST_TIMEOUT_S)
def test_every_schedule_matches_one_process_and_the_faults_do_not(dense, tmp_path):
    schedules = ("gpipe", "1f1b", "interleaved")
    jobs = [{"backend": "torch", "overrides": {**FOUR_LAYERS, "parallel.pp": 2, "parallel.schedule": s}}
            for s in schedules]
    jobs += [{"backend": "torch", "overrides": {**FOUR_LAYERS, "parallel.pp": 2}, "fault": f}
             for f in ("boundary", "loss_stage")]
    rows = _launch(tmp_path, 2, TINY_LLAMA, jobs)
    want, _, noise = dense
    for schedule, row in zip(schedules, rows, strict=False):
        assert (row["layout"]["pp"], row["layout"]["schedule"], row["layout"]["micro_batches"]) == (2, schedule, 2)
        assert within(row, dense), (f"{schedule}: gap {gap(row['losses'], want):.2e}, eval gap "
                                    f"{eval_gap(row, dense):.2e} ({noise})")
    for row in rows[3:]:  # the negative controls: far outside the same bound
        assert not within(row, dense), f"{row['fault']}: inside the tolerance ({noise})"
        assert gap(row["losses"], want) > 100 * noise.tol(SAME_MATH), row["fault"]


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TEST_TIMEOUT_S)
def test_pp_with_ep_on_four_processes_matches_one_process(moe_by_4, tmp_path):
    (row,) = _launch(tmp_path, 4, TINY_MOE, [{"backend": "torch", "overrides": {"parallel.pp": 2, "parallel.ep": 2}}])
    assert {k: row["layout"][k] for k in ("pp", "ep", "dp", "micro_batch_size", "micro_batches")} == {
        "pp": 2, "ep": 2, "dp": 1, "micro_batch_size": 4, "micro_batches": 2}
    want, _, noise = moe_by_4
    assert within(row, moe_by_4), f"gap {gap(row['losses'], want):.2e}, eval gap {eval_gap(row, moe_by_4):.2e} " \
                                  f"({noise})"

"""The diffusion transformer under several processes: FSDP2 (torch backend) and DeepSpeed ZeRO-2 and ZeRO-3 train
cv/digits_dit's tiny shape for 20 steps on two gloo ranks as one process does (the same global batches, noise and
timesteps: suite/workloads/diffusion.py draws them per step for the whole batch), within `noise.SAME_MATH` x the
noise scale measured first on this machine (tests/support/noise.py), and evaluate to the same validation loss.
Tensor parallelism (the model's own plan, Flux.apply_tp_plan) too; it has no sequence or loss parallelism, and
asking for either is refused before anything starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from support.backend_util import ROOT, env, trainbench
from support.curves import loss_curve
from support.noise import SAME_MATH, measure

from suite import registry

torch.set_num_threads(1)
STEPS = 20
SPEC = registry.find_workload("cv/digits_dit")
# The DiT's reorderings move it far less than the char GPT's (no rare token whose AdamW step a rounding error
# inflates): seen 2.4e-7 on the curve and 3e-9 on val_loss (an fp64 sum of fp32 losses) on a 2-core Xeon. Below a
# few fp32 ulps of the value itself a gap is the rounding of the last operation, so the tolerance never goes under
# ULPS ulps; a qkv row order left regrouped moves val_loss by ~3e-3, still far outside.
EPS, ULPS = torch.finfo(torch.float32).eps, 4
TINY = {"model.hidden_size": 32, "model.depth": 1, "model.depth_single_blocks": 1, "model.axes_dim": [2, 2, 4]}
LAYOUTS = [  # (backend, overrides, options, what the run must record)
    ("torch", {"parallel.fsdp": 2}, {}, {"fsdp": 2}),
    ("deepspeed", {}, {"zero_stage": 2}, {"dp": 2}),
    ("deepspeed", {}, {"zero_stage": 3}, {"dp": 2}),
    ("torch", {"parallel.tp": 2}, {}, {"tp": 2, "sp": False, "loss_parallel": False}),
]


@pytest.mark.slow  # the reference and its 4 reorderings in process, then one 2-rank torchrun of 3 layouts
@pytest.mark.timeout(1500)
def test_fsdp2_and_zero_match_one_process_over_20_steps(tmp_path):
    want, want_evals, noise = measure(SPEC, STEPS, overrides=TINY)
    assert want[-1] < 0.9 * want[0], want  # a learning curve, not a flat line that agrees trivially
    out = tmp_path / "curves.json"
    jobs = [{"backend": b, "overrides": {**TINY, **o}, "options": opts} for b, o, opts, _ in LAYOUTS]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
           "support.curves", str(out), str(SPEC), str(STEPS), *(json.dumps(j) for j in jobs)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    rows = json.loads(out.read_text())
    for (backend, _, options, expect), row in zip(LAYOUTS, rows, strict=True):
        what = f"{backend} {row['overrides']} {options}"
        assert {k: row["layout"].get(k) for k in expect} == expect, (what, row["layout"])
        gap = max(abs(a - b) for a, b in zip(row["losses"], want, strict=True))
        tol = max(noise.tol(SAME_MATH), ULPS * EPS * max(want))
        assert gap <= tol, f"{what}: curve gap {gap:.2e} > {tol:.2e} ({noise})"
        val = want_evals[STEPS]["val_loss"]
        eval_gap = abs(row["eval"]["val_loss"] - val)
        eval_tol = max(noise.eval_tol(STEPS, SAME_MATH), ULPS * EPS * val)
        assert eval_gap <= eval_tol, f"{what}: val_loss gap {eval_gap:.2e} > {eval_tol:.2e} ({noise})"
        assert eval_tol < noise.qkv_bug[STEPS], noise  # a real layout bug would still be caught
    # the tolerance means something: another seed's curve is far outside it
    other = loss_curve(SPEC, "torch", STEPS, overrides=TINY, seed=1)
    assert max(abs(a - b) for a, b in zip(other, want, strict=True)) > 5 * noise.tol(SAME_MATH), noise


def test_an_impossible_tensor_parallel_layout_is_refused_naming_the_reason(tmp_path):
    p = trainbench("run", "cv/digits_dit", "--variant", "tiny", "--nproc", "2", "--parallel", "tp=2,sp=true",
                   "--results", str(tmp_path))
    assert p.returncode == 2 and "parallel.sp" in " ".join(p.stderr.split()), p.stderr
    assert not list(tmp_path.rglob("*.json"))

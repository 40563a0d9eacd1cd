"""MLPerf's llama2_70b_lora under --backend megatron: its task (`causal_lm_samples`, suite/workloads/sample_lm.py:
labels -100 on each sample's prompt, the loss each micro-batch's mean over its labelled tokens) through Megatron's
own step (suite/backends/megatron/step.py: the -100 targets are its loss mask) against the torch backend (peft), in
one process, on the tiny variant with a fused-qkv checkpoint in the reference's layout and GovReport files in the
reference's parquet format whose train rows carry prompts of different lengths (so the two micro-batches of a step
count different numbers of tokens).

- The reference's targets (qkv_proj, o_proj): Megatron puts one adapter on the fused linear_qkv, peft three on q, k
  and v, so the adapters differ after the first step; while B is zero both are the base: the eval loss before
  training and the first step's loss agree.
- o_proj only (one adapter each side): Megatron's A copied into peft's, then the loss curve and the eval loss after
  training agree.

Tolerance: fp32 rounding of two implementations of the same sums. Seen (2-core Xeon, loaded): eval loss 4.8e-7
apart, each step's loss <= 4.8e-7 (1 ulp of 6.3). TOL = 2e-5 is 40x that. Broken once by hand: the mask dropped
(every position counted) moved the first step's loss by 0.11 and the curve by up to 0.37; a whole-batch token mean
instead of each micro-batch's (what the torch path does) by 4e-3 and up to 0.034; both tests failed each time. Training (lr 1e-2, 4 steps: the 8 train samples twice) lowers the loss
of the second pass over them by ~0.4 and moves the eval loss by ~0.02.
"""

from __future__ import annotations

import pytest
import torch
from support.datafiles import write_fused_qkv_llama, write_govreport
from support.promised import require

from suite import devices, registry
from suite.backends.base import RunOptions
from suite.harness import seed_everything
from suite.specload import load_spec
from suite.workloads.contract import Context

torch.set_num_threads(1)
require("megatron.core")
require("peft")
require("pyarrow")
FULL = registry.workload_files()["nlp/llama2_70b_lora"]
STEPS = 4
TOL = 2e-5


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    base = tmp_path_factory.mktemp("lora_samples")
    return (write_govreport(base / "gr", seq_len=64, vocab=512, train_prompts=True),
            write_fused_qkv_llama(base / "llama_fused_qkv"))


def _spec(files, targets):
    data, checkpoint = files
    return load_spec(FULL, {"data.path": str(data), "model.checkpoint": str(checkpoint), "model.dtype": "float32",
                            "model.lora.dropout": 0.0, "model.lora.target_modules": list(targets),
                            "optimizer.lr": 1e-2}, variant="tiny")


def _run(name, spec, tmp_path):
    """A backend set up on the spec as a run does it (its own backends.<name> block: grad_clip 0.3 on both)."""
    seed_everything(0)
    workload = registry.task_class(spec.task)(spec, Context(tmp_path, 0, torch.device("cpu")))
    backend = registry.backend_class(name)(devices.Device("cpu"))
    state = backend.setup(workload, RunOptions(precision="fp32", options=spec.backends.get(name, {})))
    return workload, backend, state


def _eval(workload, backend, state) -> float:
    return workload.evaluate(backend.eval_model(state))["eval_loss"]


def test_reference_targets_give_the_base_loss_on_both_backends_before_training(files, tmp_path):
    spec = _spec(files, ("qkv_proj", "o_proj"))
    assert spec.task == "causal_lm_samples" and registry.backend_class("megatron").supports(spec) is None
    tw, tb, ts = _run("torch", spec, tmp_path)
    mw, mb, ms = _run("megatron", spec, tmp_path)
    try:
        assert abs(_eval(tw, tb, ts) - _eval(mw, mb, ms)) < TOL
        first = [float(b.train_step(s, next(w.train_batches(0, 1))).loss) for w, b, s in ((tw, tb, ts), (mw, mb, ms))]
        assert abs(first[0] - first[1]) < TOL, first
    finally:
        mb.close()


def test_o_proj_adapters_train_the_same_curve_and_eval_loss_on_both_backends(files, tmp_path):
    spec = _spec(files, ("o_proj",))
    tw, tb, ts = _run("torch", spec, tmp_path)
    mw, mb, ms = _run("megatron", spec, tmp_path)
    try:
        ours = dict(ms.raw_model.named_parameters())
        theirs = {n: p for n, p in ts.raw_model.named_parameters() if "lora_" in n}
        assert len(theirs) == 4 and {n for n, p in ours.items() if p.requires_grad} == {
            f"decoder.layers.{i}.self_attention.linear_proj.adapter.lora_{ab}" for i in range(2) for ab in "AB"}
        with torch.no_grad():  # peft draws A from the global generator, Megatron's adapters from their own
            for i in range(2):
                theirs[f"layers.{i}.attention.wo.lora_A.default.weight"].copy_(
                    ours[f"decoder.layers.{i}.self_attention.linear_proj.adapter.lora_A"])
        before = _eval(tw, tb, ts), _eval(mw, mb, ms)
        curves = []
        for w, b, s in ((tw, tb, ts), (mw, mb, ms)):
            batches = w.train_batches(0, 1)
            curves.append([float(b.train_step(s, next(batches)).loss) for _ in range(STEPS)])
        after = _eval(tw, tb, ts), _eval(mw, mb, ms)
    finally:
        mb.close()
    assert abs(before[0] - before[1]) < TOL, before
    assert max(abs(a - b) for a, b in zip(*curves, strict=True)) < TOL, curves
    assert abs(after[0] - after[1]) < TOL, after
    # the adapters learn, a curve and not the base's flat line: steps 3-4 (the 8 samples again, in another order)
    # lower than steps 1-2, and the eval loss moved
    assert sum(curves[1][2:]) < sum(curves[1][:2]) - 0.2, curves
    assert abs(after[1] - before[1]) > 1e-3, (before, after)


@pytest.mark.slow  # one two-process launch (gloo), three layouts
@pytest.mark.timeout(600)
def test_dp2_tp2_pp2_give_the_one_process_curve_and_eval_loss(files, tmp_path):
    """Data parallelism (each rank one of the two micro-batches: the per-micro-batch means averaged by DDP),
    tp=2 (the masked vocab-parallel cross-entropy over two vocabulary shards) and pp=2 (the targets reach the last
    stage through the schedule's data iterator; the eval logits broadcast from it) against one process: the loss
    curve, and the eval loss before training (the base; the one-process test compares it after training too)."""
    import json
    import subprocess
    import sys

    from support.backend_util import ROOT, env

    from suite.workloads.sample_lm import token_losses

    spec = _spec(files, ("o_proj",))
    w, b, s = _run("megatron", spec, tmp_path)
    try:
        want_eval = _eval(w, b, s)  # before training, as megatron_shards takes its logits
        batches = w.train_batches(0, 1)
        want = [float(b.train_step(s, next(batches)).loss) for _ in range(STEPS)]
    finally:
        b.close()
    torch.save(w.val_ids, tmp_path / "ids.pt")
    data, checkpoint = files
    base = {"variant": "tiny", "data.path": str(data), "model.checkpoint": str(checkpoint), "model.dtype": "float32",
            "model.lora.dropout": 0.0, "model.lora.target_modules": ["o_proj"], "optimizer.lr": 1e-2}
    jobs = [{}, {"parallel.tp": 2}, {"parallel.pp": 2}]
    out = tmp_path / "layouts.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "support.megatron_shards", str(out), str(FULL), str(tmp_path / "ids.pt"), str(STEPS),
           json.dumps(base), *(json.dumps(j) for j in jobs)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=540)
    assert p.returncode == 0, p.stderr[-4000:]
    rows = torch.load(out)
    for job in jobs:
        row = rows[json.dumps(job)]
        assert {k: row["layout"][k] for k in ("dp", "tp", "pp")} == {
            "dp": 2 if not job else 1, "tp": job.get("parallel.tp", 1), "pp": job.get("parallel.pp", 1)}
        # the logits before training -> the workload's eval loss (the mean of each validation sample's own mean)
        total, count = token_losses(row["logits"], w.val_labels)
        got_eval = float((total / count).mean())
        gap = max(abs(a - c) for a, c in zip(row["losses"], want, strict=True))
        assert gap < TOL and abs(got_eval - want_eval) < TOL, (job, row["losses"], want, got_eval, want_eval)

"""Parity: the same spec and seed give the same loss curve under torch, DeepSpeed (ZeRO 0-3) and Megatron-core.

Curves are compared step by step over the first N steps of the test char GPT (tests/support/specs/char_gpt.yaml).
Tolerances (absolute, per-step loss in nats, fp32 on CPU) are multiples of the one-process curve's bound,
measured first on the machine that runs the test (tests/support/noise.py: the spread of the same run with each
batch's samples in four other orders; the bound 1.5e-5 over 12 steps on an AMD Zen 5, 2.9e-5 with AVX2 kernels):
- DeepSpeed ZeRO 0-3 with the spec's optimizer as client optimizer: the same arithmetic as torch, in the same
  order; seen bit-identical, allowed 1e-5 (exact up to a last-bit difference; no rounding to grow).
- DeepSpeed with gradient accumulation, and two processes (gloo all-reduce): the same sums in another order,
  `noise.SAME_MATH` x the scale.
- Megatron TP=1, TP=2 and TP=1 x DP=2 (its own attention and LayerNorm kernels): `noise.OTHER_KERNELS` x.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from support.backend_util import CHAR_GPT, ROOT, env
from support.curves import loss_curve
from support.noise import OTHER_KERNELS, Noise, measure
from support.promised import require

torch.set_num_threads(1)
require("deepspeed")
require("megatron.core")

STEPS = 12


@pytest.fixture(scope="module")
def reference() -> tuple[list[float], dict[int, dict], Noise]:
    return measure(CHAR_GPT, STEPS)


@pytest.fixture(scope="module")
def torch_curve(reference) -> list[float]:
    return reference[0]


@pytest.fixture(scope="module")
def noise(reference) -> Noise:
    return reference[2]


def assert_curves_agree(got: list[float], want: list[float], tol: float) -> None:
    assert len(got) == len(want) == STEPS
    worst = max(abs(a - b) for a, b in zip(got, want, strict=True))
    assert worst <= tol, f"loss curves differ by up to {worst:.2e} (> {tol:.2e}):\n{got}\n{want}"
    assert want[-1] < want[0] - 0.5  # and they are learning curves, not flat lines that trivially agree


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_deepspeed_zero_matches_torch(torch_curve, stage):
    assert_curves_agree(loss_curve(CHAR_GPT, "deepspeed", STEPS, {"zero_stage": stage}), torch_curve, 1e-5)


def test_deepspeed_gradient_accumulation_matches_torch(torch_curve, noise):
    curve = loss_curve(CHAR_GPT, "deepspeed", STEPS, {"zero_stage": 2, "gradient_accumulation_steps": 4})
    assert_curves_agree(curve, torch_curve, noise.tol())


def test_megatron_tp1_matches_torch(torch_curve, noise):
    assert_curves_agree(loss_curve(CHAR_GPT, "megatron", STEPS, {"tp": 1}), torch_curve, noise.tol(OTHER_KERNELS))


def test_a_different_seed_is_not_within_tolerance(torch_curve, noise):
    # the tolerances above are meaningful: the noise is real (not 0), another initialisation far outside them
    assert noise.curve > 0, noise
    other = loss_curve(CHAR_GPT, "torch", STEPS, seed=1)
    assert max(abs(a - b) for a, b in zip(other, torch_curve, strict=True)) > 100 * noise.tol(OTHER_KERNELS)


LAUNCH_GUARD_S = 900  # the torchrun child's hang guard; the test's pytest timeout lies above it and the fixture


@pytest.mark.slow
@pytest.mark.timeout(300 + LAUNCH_GUARD_S + 120)  # the module's torch curve (if not built yet), the launch, margin
def test_two_processes_torch_ddp_deepspeed_zero2_zero3_megatron_tp2(torch_curve, noise, tmp_path):
    """One torchrun launch runs all five in turn (DeepSpeed's and torchrun's start-up paid once)."""
    out = tmp_path / "curves.json"
    runs = ["torch", 'deepspeed:{"zero_stage": 2}', 'deepspeed:{"zero_stage": 3}', 'megatron:{"tp": 2}',
            'megatron:{"tp": 1}']
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "support.curves", str(out), str(CHAR_GPT), str(STEPS), *runs]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=LAUNCH_GUARD_S)
    assert p.returncode == 0, p.stderr[-4000:]
    got = {(r["backend"], json.dumps(r["options"], sort_keys=True)): r for r in json.loads(out.read_text())}
    ddp = got[("torch", "{}")]
    assert ddp["layout"]["dp"] == 2
    assert_curves_agree(ddp["losses"], torch_curve, noise.tol())
    for stage in (2, 3):
        r = got[("deepspeed", json.dumps({"zero_stage": stage}))]
        assert r["layout"]["dp"] == 2 and r["layout"]["zero_stage"] == stage
        assert_curves_agree(r["losses"], torch_curve, noise.tol())
    meg = got[("megatron", json.dumps({"tp": 2}))]
    assert meg["layout"]["tp"] == 2 and meg["layout"]["dp"] == 1
    assert_curves_agree(meg["losses"], torch_curve, noise.tol(OTHER_KERNELS))
    meg_dp = got[("megatron", json.dumps({"tp": 1}))]  # Megatron model, data parallel over its DP group
    assert meg_dp["layout"]["tp"] == 1 and meg_dp["layout"]["dp"] == 2
    assert_curves_agree(meg_dp["losses"], torch_curve, noise.tol(OTHER_KERNELS))


def test_bf16_paths_stay_close_to_torch_bf16():
    # bf16 rounds differently in each backend (autocast vs bf16 weights): a loose bound over a few steps
    want = loss_curve(CHAR_GPT, "torch", 4, precision="bf16")
    for backend, opts in (("deepspeed", {"zero_stage": 2}), ("megatron", {"tp": 1})):
        got = loss_curve(CHAR_GPT, backend, 4, opts, precision="bf16")
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 2e-2, (backend, got, want)

"""DeepSpeed backend: options -> ds_config, spec validation, support checks, and a real run to the target."""

from __future__ import annotations

import os

import pytest
import torch
from support.backend_util import CHAR_GPT, DIGITS, json_rows, run_hang_guard_s, trainbench
from support.promised import require

from suite.backends.deepspeed.backend import Options, ds_config, supports
from suite.results.record import read_result
from suite.spec import SpecError
from suite.specload import load_spec

torch.set_num_threads(1)
require("deepspeed")


def test_options_become_a_ds_config():
    opts = Options(zero_stage=3, offload_optimizer="cpu", offload_param="cpu", gradient_accumulation_steps=2,
                   grad_clip=1.5)
    cfg = ds_config(opts, "bf16", global_batch=64, dp=2)
    assert cfg["train_batch_size"] == 64
    assert cfg["train_micro_batch_size_per_gpu"] == 16  # 64 / (2 ranks x 2 micro-batches)
    assert cfg["gradient_accumulation_steps"] == 2
    assert cfg["zero_optimization"] == {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                        "offload_param": {"device": "cpu"}}
    assert cfg["bf16"] == {"enabled": True} and "fp16" not in cfg
    assert cfg["gradient_clipping"] == 1.5


def test_clipping_is_off_unless_asked():
    # DeepSpeed 0.19.8 clips at 1.0 by default; the spec (and the torch backend) do not clip
    assert ds_config(Options(), "fp32", 32, 1)["gradient_clipping"] == 0.0


def test_raw_ds_config_is_merged_over():
    opts = Options(zero_stage=2, ds_config={"zero_optimization": {"overlap_comm": True}, "steps_per_print": 5})
    cfg = ds_config(opts, "fp16", 32, 1)
    assert cfg["zero_optimization"] == {"stage": 2, "overlap_comm": True}
    assert cfg["steps_per_print"] == 5 and cfg["fp16"]["enabled"] is True


def test_indivisible_batch_is_refused():
    with pytest.raises(ValueError, match="gradient_accumulation_steps 3"):
        ds_config(Options(gradient_accumulation_steps=3), "fp32", 64, 1)


def test_unknown_key_in_the_spec_block_names_the_field():
    with pytest.raises(SpecError) as e:
        load_spec(DIGITS, {"backends.deepspeed.zero_stag": 2})
    assert "backends.deepspeed.zero_stag" in str(e.value) and "unknown field" in str(e.value)
    with pytest.raises(SpecError, match=r"backends\.deepspeed\.zero_stage"):
        load_spec(DIGITS, {"backends.deepspeed.zero_stage": 4})


def test_supports_every_domain_but_inconsistent_offload():
    assert supports(load_spec(DIGITS)) is None
    assert supports(load_spec(CHAR_GPT)) is None
    bad = load_spec(DIGITS, {"backends.deepspeed": {"zero_stage": 2, "offload_param": "cpu"}})
    assert "offload_param needs zero_stage: 3" in supports(bad)


# a generous wall-clock budget: the claim is convergence under DeepSpeed, not speed on a shared CPU (digits needs
# seconds on a quiet one); the hang guards lie above all that budget lets the run take (init, budget, one stall
# window), so a slow run under load ends by its own limits or reaches, never by pytest's timeout
BUDGET_S = 900
GUARD_S = run_hang_guard_s(DIGITS, {"budget.max_train_s": BUDGET_S})


# one torch thread: without --threads the run takes one per core, and two OpenMP threads on two busy cores wait
# for each other at every parallel region (under a full CPU hog this run took 20x its quiet time, one-thread
# runs 3-9x: docs/testing.md)
@pytest.mark.slow
@pytest.mark.timeout(int(GUARD_S) + 60)
def test_digits_reaches_its_target_under_deepspeed_and_records_the_layout(tmp_path):
    p = trainbench("run", "cv/digits_cnn", "--backend", "deepspeed", "--set", f"budget.max_train_s={BUDGET_S}",
                   "--threads", "1", "--results", str(tmp_path), "--json", "--quiet", timeout=GUARD_S)
    assert p.returncode == 0, p.stderr[-3000:]
    [row] = json_rows(p.stdout)
    assert row["status"] == "reached", row
    result = read_result(next(tmp_path.rglob("*.json")))
    assert result.backend == "deepspeed" and result.backend_version
    deepspeed_keys = ("dp", "tp", "pp", "zero_stage", "offload", "gradient_accumulation_steps")
    assert {k: result.parallel.get(k) for k in deepspeed_keys} == {
        "dp": 1, "tp": 1, "pp": 1, "zero_stage": 0, "offload": None, "gradient_accumulation_steps": 1}
    assert result.parallel["fsdp"] == 1 and result.parallel["ac"] == "none"  # the whole layout is recorded
    assert "RANK" not in os.environ  # the backend's env set-up did not leak into this process


def test_fp16_on_cpu_is_a_clear_error(tmp_path):
    p = trainbench("run", "cv/digits_cnn", "--variant", "tiny", "--backend", "deepspeed", "--precision", "fp16",
                   "--results", str(tmp_path), "--json", "--quiet")
    assert p.returncode == 1
    [row] = json_rows(p.stdout)
    assert row["status"] == "error" and "no fp16; use bf16 or fp32 on CPU" in row["error"]


@pytest.mark.slow
def test_two_processes_through_trainbench_run_record_zero3_layout(tmp_path):
    p = trainbench("run", "cv/digits_cnn", "--variant", "tiny", "--backend", "deepspeed", "--nproc", "2",
                   "--set", "backends.deepspeed.zero_stage=3", "--results", str(tmp_path), "--json", "--quiet")
    assert p.returncode == 0, p.stderr[-3000:]
    [row] = json_rows(p.stdout)  # rank 0 alone reports and writes
    assert row["status"] in ("reached", "budget") and row["steps"] > 0, row
    [path] = list(tmp_path.rglob("*.json"))
    result = read_result(path)
    assert result.world_size == 2
    assert result.parallel["dp"] == 2 and result.parallel["zero_stage"] == 3

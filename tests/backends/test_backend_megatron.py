"""Megatron-core backend: the GPTModel is the suite GPT (same weights, same logits), support checks, the CPU
shim is scoped to a run, and the char GPT reaches its target through `trainbench run --backend megatron`."""

from __future__ import annotations

import pytest
import torch
from support.backend_util import CHAR_GPT, DIGITS, json_rows, run_hang_guard_s, trainbench
from support.promised import require

from suite import devices, registry
from suite.backends.base import RunOptions
from suite.backends.megatron.backend import MegatronBackend
from suite.backends.megatron.options import supports
from suite.data.locate import data_root
from suite.harness import seed_everything
from suite.results.record import read_result
from suite.spec import SpecError
from suite.specload import load_spec
from suite.workloads.contract import Context

torch.set_num_threads(1)
require("megatron.core")


def _workload(spec):
    seed_everything(0)
    return registry.task_class(spec.task)(spec, Context(data_root=data_root(), seed=0, device=torch.device("cpu")))


@pytest.mark.parametrize("overrides", [{}, {"model.bias": True, "model.tie_embeddings": False}])
def test_megatron_model_computes_the_suite_gpt(overrides):
    spec = load_spec(CHAR_GPT, overrides)
    workload = _workload(spec)
    seed_everything(0)
    reference = workload.build_model().eval()
    cuda_current_device = torch.cuda.current_device
    backend = MegatronBackend(devices.Device("cpu"))
    try:
        seed_everything(0)
        state = backend.setup(workload, RunOptions())  # builds its own reference under the same seed
        model = backend.eval_model(state).eval()
        x = workload.val_x[:4]
        with torch.no_grad():
            want, got = reference(x), model(x)
        assert got.shape == want.shape == (4, spec.model.params()["seq_len"], workload.vocab)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
        assert backend.parallel_layout()["tp"] == 1
    finally:
        backend.close()
    assert torch.cuda.current_device is cuda_current_device  # the CPU shim is gone after the run


def test_layernorm_bias_stays_pinned_when_the_model_has_none():
    spec = load_spec(CHAR_GPT)
    backend = MegatronBackend(devices.Device("cpu"))
    try:
        state = backend.setup(_workload(spec), RunOptions())
        biases = [p for n, p in state.raw_model.named_parameters() if n.endswith("bias")]
        assert biases and all(not p.requires_grad and not p.any() for p in biases)
    finally:
        backend.close()


def test_non_transformer_workloads_are_unsupported():
    reason = supports(load_spec(DIGITS))
    assert reason and "model.arch gpt" in reason and "'cnn'" in reason


def test_degrees_are_checked():
    assert "does not divide model.n_head=4" in supports(load_spec(CHAR_GPT, {"backends.megatron.tp": 3}))
    assert supports(load_spec(CHAR_GPT, {"backends.megatron.pp": 2})) is None  # 2 layers, 2 stages
    assert "does not divide model.n_layer=2" in supports(load_spec(CHAR_GPT, {"parallel.pp": 3, "parallel.dp": 1}))
    assert "contradicts parallel.tp=1" in supports(load_spec(CHAR_GPT, {"backends.megatron.tp": 2, "parallel.pp": 2}))
    # fsdp is Megatron's distributed optimizer (suite/backends/translate.py); partial sharding is refused
    assert supports(load_spec(CHAR_GPT, {"parallel.fsdp": 2})) is None
    assert "num_distributed_optimizer_instances" in supports(load_spec(CHAR_GPT, {"parallel.fsdp": 2, "parallel.dp": 2}))
    with pytest.raises(SpecError, match=r"backends\.megatron\.tensor_parallel"):
        load_spec(CHAR_GPT, {"backends.megatron.tensor_parallel": 2})


def test_unsupported_pair_is_refused_before_anything_starts(tmp_path):
    for extra in ([], ["--nproc", "2"]):
        p = trainbench("run", "cv/digits_cnn", "--backend", "megatron", "--results", str(tmp_path), *extra)
        assert p.returncode == 2, p.stderr
        text = " ".join(p.stderr.split())  # rich wraps long lines
        assert "cv/digits_cnn" in text and "cannot run on --backend megatron" in text and "list --matrix" in text
        assert "init" not in text  # no run began
    assert not list(tmp_path.rglob("*.json"))


def test_a_tier_skips_what_the_backend_cannot_run(tmp_path):
    root = tmp_path / "workloads"  # a workloads folder holding only the CNN spec
    (root / "cv").mkdir(parents=True)
    (root / "cv" / "digits_cnn.yaml").write_text(DIGITS.read_text())
    p = trainbench("run", "--tier", "smoke", "--backend", "megatron", "--results", str(tmp_path / "res"),
                   TRAINBENCH_WORKLOADS=str(root))
    text = " ".join(p.stderr.split())
    assert p.returncode == 2, text
    assert "skipping cv/digits_cnn: not supported by --backend megatron" in text
    assert "no workload of this tier runs on --backend megatron" in text
    assert not (tmp_path / "res").exists()


# the claim is convergence under Megatron-core, not speed: a generous budget, and hang guards above all that budget
# lets the run take (init, budget, one stall window), so a slow run under load never ends by pytest's timeout
BUDGET_S = 900
GUARD_S = run_hang_guard_s(CHAR_GPT, {"budget.max_train_s": BUDGET_S})


# one torch thread: without --threads the run takes one per core, and two OpenMP threads on two busy cores wait
# for each other at every parallel region (under a full CPU hog this run took 20x its quiet time, one-thread
# runs 3-9x: docs/testing.md)
@pytest.mark.slow
@pytest.mark.timeout(int(GUARD_S) + 60)
def test_char_gpt_reaches_its_target_under_megatron(tmp_path):
    p = trainbench("run", str(CHAR_GPT), "--backend", "megatron", "--set", f"budget.max_train_s={BUDGET_S}",
                   "--threads", "1", "--results", str(tmp_path), "--json", "--quiet", timeout=GUARD_S)
    assert p.returncode == 0, p.stderr[-3000:]
    [row] = json_rows(p.stdout)
    assert row["status"] == "reached", row
    result = read_result(next(tmp_path.rglob("*.json")))
    assert result.backend == "megatron" and result.backend_version.startswith("0.")
    assert result.parallel["tp"] == 1 and result.parallel["dp"] == 1 and result.parallel["pp"] == 1
    assert result.final_metrics["val_loss"] <= 2.5

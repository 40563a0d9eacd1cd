"""benchmarks/device_check.py in its CPU dry mode: real tiny runs of full-tier workloads through the harness,
one JSON with every figure, and a non-zero exit when anything fails (here: a data set that is not there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device_check.py"


def _check(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out_file = tmp_path / "device_check.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--no-compile", "--threads", "1",
                           "--no-tta", "--no-gemm", "--out", str(out_file), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    return proc, (json.loads(out_file.read_text()) if out_file.exists() else {})


@pytest.mark.slow  # two tiny full-tier runs on CPU, ~30 s
def test_dry_mode_runs_full_tier_tiny_variants_and_records_every_figure(tmp_path):
    proc, report = _check(tmp_path, "--steps", "3", "--backends", "torch", "--workloads", "cv/cifar10_resnet",
                          "nlp/gpt2_124m", "nlp/llama31_8b", "--synthetic-data", str(tmp_path / "data"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["ok"] is True and report["dry_mode"] is True and report["failures"] == []
    assert report["settings"]["synthetic_data"] == str(tmp_path / "data")  # the files the tests' writers make
    assert [r["workload"] for r in report["runs"]] == ["cv/cifar10_resnet", "nlp/gpt2_124m", "nlp/llama31_8b"]
    for r in report["runs"]:
        assert r["status"] in ("reached", "budget") and r["steps"] <= 3
        assert r["step_time_p50_s"] > 0 and r["mfu"] > 0 and r["mfu_measured_peak"] > 0
        assert r["peak_tflops"] > 0 and r["measured_gemm_tflops"] > 0
        assert r["flops"]["relative_error"] <= 0.10 and r["flops"]["counted_per_sample"] > 0
        assert "energy_j" in r and r["memory"]
    assert report["runs"][1]["dtypes"] == {"matmul": "fp32", "attention": "fp32"}
    est = report["runs"][1]["memory_estimate"]  # GPT: the estimator beside the run, the full spec's fit
    assert est["tiny_estimate_bytes"] > 0 and est["full_estimate_bytes"] > 20 * 2**30 and "full_fits" in est
    assert "software" in report and "hardware" in report
    assert "cv/cifar10_resnet | torch | fp32 | " in proc.stdout  # the printed table
    llm = report["runs"][2]["memory_estimate"]  # the Llama estimator, and the full spec's fsdp=8 layout
    assert llm["tiny_estimate_bytes"] > 0 and llm["full_estimate_bytes"] > 10 * 2**30
    step = report["llama8b_step"]  # the tiny stand-in of the 8B step, beside torchtitan's goal
    assert step["step_time_p50_s"] > 0 and step["mfu"] > 0 and step["goal"]["tokens_per_s_per_gpu"] == 5762


def test_a_failure_exits_non_zero_and_is_named(tmp_path):
    proc, report = _check(tmp_path, "--steps", "2", "--backends", "torch", "--workloads", "cv/cifar10_resnet",
                          "--set-json", json.dumps({"cv/cifar10_resnet": {"data.path": str(tmp_path / "none")}}))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert report["ok"] is False and report["runs"][0]["status"] == "data_missing"
    assert any("cv/cifar10_resnet / torch: data_missing" in f for f in report["failures"])


def test_no_accelerator_without_dry_mode_is_bad_input(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "x.json")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--device cpu" in proc.stderr


# ---- the paths a CUDA or NPU device takes, on this CPU with fakes ---------------------------------------------


def _module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gemm_table_per_dtype_on_a_faked_h200():
    """Each dtype the device offers is measured and set beside the table's dense peak; a dtype that fails is a row
    with its reason (and a failure of the check), never a crash."""
    from suite.measure.peaks import GemmResult

    dc = _module()
    measured = {"fp32": 50e12, "tf32": 400e12, "bf16": 800e12}

    def measure(dtype):
        if dtype not in measured:
            raise RuntimeError("no fp16 kernel in this fake")
        return GemmResult(measured[dtype], 8192, dtype, 20, 1.0)

    rows = {r["dtype"]: r for r in dc.gemm_table("cuda", "NVIDIA H200", measure)}
    assert list(rows) == ["fp32", "tf32", "bf16", "fp16"]
    assert rows["bf16"]["table_tflops"] == pytest.approx(989.5, rel=0.01)  # H200 = H100 SXM dense bf16
    assert rows["bf16"]["measured_over_table"] == pytest.approx(800 / rows["bf16"]["table_tflops"])
    assert rows["tf32"]["table_tflops"] > rows["fp32"]["table_tflops"]
    assert rows["fp16"]["measured_tflops"] is None and "no fp16 kernel" in rows["fp16"]["error"]
    npu = [r["dtype"] for r in dc.gemm_table("npu", "Ascend910B3", lambda d: GemmResult(1e12, 4096, d, 3, 1.0))]
    assert npu == ["fp32", "hf32", "bf16", "fp16"]


def test_fp32_is_measured_with_tf32_off_and_tf32_with_it_on(monkeypatch):
    import torch

    from suite.measure import peaks

    dc = _module()
    seen = []

    def fake(device, precision, budget_s, n=None, dtype=None):
        seen.append((dtype, torch.backends.cuda.matmul.allow_tf32))
        return peaks.GemmResult(1.0, 1, dtype, 1, 1.0)

    monkeypatch.setattr(peaks, "measure_gemm", fake)
    before = torch.backends.cuda.matmul.allow_tf32  # a property of torch's, not an attribute monkeypatch can undo
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        measure = dc.measure_gemm_exactly(torch.device("cuda"), 0.1)  # a device object only: nothing runs on it
        for dtype in ("fp32", "tf32", "bf16"):
            measure(dtype)
        assert seen == [("fp32", False), ("tf32", True), ("bf16", True)]
        assert torch.backends.cuda.matmul.allow_tf32 is True  # restored
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_device_memory_and_the_full_gpt2_fit_on_a_faked_h200():
    from types import SimpleNamespace

    from suite.specload import load_spec

    dc = _module()
    h200 = SimpleNamespace(device_type="cuda", memory_bytes=2 * 2**40, devices=[{"memory_bytes": 141 * 10**9}])
    assert dc.device_memory_bytes(h200) == 141 * 10**9
    assert dc.device_memory_bytes(SimpleNamespace(device_type="cpu", memory_bytes=24 * 2**30, devices=[])) == 24 * 2**30
    tiny = load_spec(ROOT / "workloads" / "nlp" / "gpt2_124m.yaml", variant="tiny")
    row = dc.memory_row("nlp/gpt2_124m", tiny, "bf16", {"device_peak_allocated_bytes": 10**6}, 141 * 10**9)
    assert row["full_fits"] is True and "fits: estimated peak 30.9 GiB" in row["full_fit"]
    assert row["tiny_ratio"] == pytest.approx(row["tiny_estimate_bytes"] / 10**6)
    small = dc.memory_row("nlp/gpt2_124m", tiny, "bf16", {}, 24 * 10**9)  # a 24 GB card cannot hold it
    run = {"workload": "nlp/gpt2_124m", "backend": "torch", "status": "budget", "memory_estimate": small}
    assert any("the full spec does NOT fit" in f for f in dc.failures_of(run, 0.1))
    assert dc.failures_of(run, 0.1, dry_mode=True) == []  # the CPU's memory says nothing of a runner's


def test_out_defaults_under_OUT(monkeypatch, tmp_path):
    dc = _module()
    monkeypatch.setenv("OUT", str(tmp_path / "o"))
    assert dc.parse_args([]).out == tmp_path / "o" / "device_check.json"
    monkeypatch.delenv("OUT")
    assert dc.parse_args([]).out == Path("device_check.json")


DRY_GUARD_S = 900  # the child's hang guard: above its run's 600 s budget, and pytest's timeout above both


@pytest.mark.slow  # the GEMM peaks and digits to its target on CPU: ~30 s
@pytest.mark.timeout(DRY_GUARD_S + 60)
def test_dry_mode_measures_gemm_by_dtype_and_time_to_target(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(tmp_path / "out")}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--no-compile", "--threads", "1",
                           "--workloads", "--gemm-budget-s", "0.3", "--set-json",
                           json.dumps({"cv/digits_cnn": {"budget.max_train_s": 600}})],  # a loaded CI host
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=DRY_GUARD_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "device_check.json").read_text())
    assert [g["dtype"] for g in report["gemm"]] == ["fp32", "bf16"]
    assert all(g["measured_tflops"] > 0 and g["table_tflops"] > 0 for g in report["gemm"])
    tta = report["tta"]
    assert tta["status"] == "reached" and tta["time_to_target_s"] > 0 and tta["steps_to_target"] > 0
    assert report["device_memory_bytes"] > 0 and report["hardware"]["device_type"] == "cpu"
    assert "TTA cv/digits_cnn: reached" in proc.stdout


def test_llama8b_step_fits_layers_by_the_estimator_and_measures_the_stand_in():
    """On a device the 8B preset runs with as many layers as fit; on the CPU its tiny stand-in goes the same way."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("llama8b_step", ROOT / "benchmarks" / "llama8b_step.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    h100, h200 = mod.layers_that_fit(80 * 10**9), mod.layers_that_fit(141 * 10**9)
    assert 1 <= h100 < h200 < mod.FULL_LAYERS, (h100, h200)  # the whole 8B model fits neither device alone
    row = mod.probe(torch.device("cpu"), "cpu", None, steps=2, threads=1)
    assert "error" not in row, row
    assert row["step_time_p50_s"] > 0 and 0 < row["mfu"] < 1 and row["tokens_per_s"] > 0
    assert row["goal"]["tokens_per_s_per_gpu"] == 5762 and row["goal"]["tokens_per_s_per_gpu_compiled"] == 6667
    assert row["goal"]["mfu_range"] == [0.33, 0.39] and "stand_in" in row


def test_a_fine_tune_without_its_extra_is_skipped_with_the_packages_named(monkeypatch):
    """A lent device carries the runtime wheels, not the finetune extra: nlp/llama2_70b_lora is listed as skipped,
    naming what it needs, instead of failing on an import."""
    import importlib.util

    from suite import registry
    from suite.specload import load_spec

    dc = _module()
    spec = load_spec(registry.find_workload("nlp/llama2_70b_lora"), {"model.checkpoint": "/m"}, variant="tiny")
    present = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n in ("peft", "pyarrow") else present(n, *a))
    assert dc.missing_extras(spec) == ["peft", "pyarrow"]
    digits = load_spec(registry.find_workload("cv/digits_cnn"), variant="tiny")
    assert dc.missing_extras(digits) == []


@pytest.mark.slow  # one tiny agentic GRPO run on CPU, ~30-40 s
def test_dry_mode_runs_the_agentic_grpo_tiny_variant_with_its_phases(tmp_path):
    """rl/qwen35_397b_grpo's tiny variant is a full-tier leg: its row carries the async overlap and staleness."""
    proc, report = _check(tmp_path, "--steps", "3", "--backends", "torch", "--no-llama8b", "--workloads",
                          "rl/qwen35_397b_grpo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = report["runs"]
    ph = run["phases"]
    assert run["status"] in ("reached", "budget") and run["flops"]["relative_error"] <= 0.10
    assert ph["rollout_mode"] == "async" and ph["staleness"] == 1 and ph["max_staleness"] <= 1
    assert ph["seconds"]["tool"] > 0 and ph["mean_turns"] >= 1 and "overlap_s" in ph


@pytest.mark.slow  # two tiny recommender runs on CPU, ~40 s under load
def test_dry_mode_runs_the_full_recommender_recipes_on_generated_files(tmp_path):
    """rec/dlrmv4 and rec/dlrm_dcnv2 (full tier) run their tiny variants without --synthetic-data: FIXTURES writes
    processed Yambda and Criteo days in their real layouts (a device machine has neither data set)."""
    env_tmp = tmp_path / "tmp"
    env_tmp.mkdir()
    out_file = tmp_path / "device_check.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(env_tmp)}  # fresh fixture folders
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--no-compile", "--threads", "1",
                           "--no-tta", "--no-gemm", "--no-llama8b", "--steps", "3", "--backends", "torch",
                           "--workloads", "rec/dlrmv4", "rec/dlrm_dcnv2", "--out", str(out_file)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out_file.read_text())
    assert [r["workload"] for r in report["runs"]] == ["rec/dlrmv4", "rec/dlrm_dcnv2"], report["runs"]
    for r in report["runs"]:
        assert r["status"] == "budget" and r["steps"] == 3, r
        assert r["flops"]["relative_error"] <= 0.10 and r["embedding_bytes_per_s"] > 0, r
    written = {p.name for p in env_tmp.iterdir()}
    assert {"trainbench-fixture-rec_dlrm_dcnv2", "trainbench-fixture-rec_dlrmv4"} <= written, written

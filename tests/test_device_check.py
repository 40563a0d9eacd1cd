"""benchmarks/device_check.py in its CPU dry mode: real tiny runs of full-tier workloads through the harness,
one JSON with every figure, and a non-zero exit when anything fails (here: a data set that is not there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "device_check.py"


def _check(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out_file = tmp_path / "device_check.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--no-compile", "--threads", "1",
                           "--out", str(out_file), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    return proc, (json.loads(out_file.read_text()) if out_file.exists() else {})


@pytest.mark.slow  # two tiny full-tier runs on CPU, ~30 s
def test_dry_mode_runs_full_tier_tiny_variants_and_records_every_figure(tmp_path):
    from datafiles import full_tier_overrides

    sets = full_tier_overrides(tmp_path / "data")
    proc, report = _check(tmp_path, "--steps", "3", "--backends", "torch", "--workloads", "cv/cifar10_resnet",
                          "nlp/gpt2_124m", "--set-json", json.dumps(sets))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["ok"] is True and report["dry_mode"] is True and report["failures"] == []
    assert [r["workload"] for r in report["runs"]] == ["cv/cifar10_resnet", "nlp/gpt2_124m"]
    for r in report["runs"]:
        assert r["status"] in ("reached", "budget") and r["steps"] <= 3
        assert r["step_time_p50_s"] > 0 and r["mfu"] > 0 and r["mfu_measured_peak"] > 0
        assert r["peak_tflops"] > 0 and r["measured_gemm_tflops"] > 0
        assert r["flops"]["relative_error"] <= 0.10 and r["flops"]["counted_per_sample"] > 0
        assert "energy_j" in r and r["memory"]
    assert report["runs"][1]["dtypes"] == {"matmul": "fp32", "attention": "fp32"}
    assert "software" in report and "hardware" in report
    assert "cv/cifar10_resnet | torch | fp32 | " in proc.stdout  # the printed table


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

"""`compare --baseline mlperf:SUBMITTER/SYSTEM`: local runs against a published system imported from its MLPerf logs,
with today's statistics, and a plain word where the two are not like for like (batch size, precision)."""

from __future__ import annotations

import json
import random
import subprocess

import pytest
from support import mlperf_fixture
from support.faults import cli
from support.faults import env as subprocess_env

from benchmarks.sim.results import noisy_runs, write_all
from suite.mlperf import importer

SYSTEM = "AMD/MI355X_EPYC_9575F_pytorch"


def _compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(cli("compare", *args), capture_output=True, text=True, env=subprocess_env(), timeout=600)


def _candidates(root, time_per_step_s: float, precision: str = "bf16", batch: int = 8):
    runs = noisy_runs(random.Random(7), 5, steps=1000, time_per_step_s=time_per_step_s, cv_steps=0.01, cv_time=0.01,
                      workload="nlp/llama2_70b_lora", hardware="nvidia-h100-x8", spec_hash="local0001")
    for r in runs:
        r.config["precision"] = precision
        r.config["spec"]["data"] = {"batch_size": batch}
    return write_all(root, runs)


@pytest.mark.slow  # imports 20 logs and runs compare three times in subprocesses: ~40 s quiet, minutes under load
def test_a_local_runner_against_a_published_system(tmp_path):
    published = tmp_path / "results"
    src = mlperf_fixture.unpack(tmp_path / "src")
    report = importer.import_tree(src / "AMD", published, "5.1.0", workers=1)
    assert len(report.imported) == 20
    slow = _candidates(tmp_path / "slow", time_per_step_s=0.85)  # ~850 s against the published ~610 s: 1.4x
    p = _compare("--baseline", f"mlperf:{SYSTEM}", "--candidate", str(slow), "--published", str(published),
                 "--format", "json")
    assert p.returncode == 1, p.stdout + p.stderr  # a regression: the published system is faster
    pairs = json.loads(p.stdout)["pairs"]
    assert len(pairs) == 1 and pairs[0]["workload"] == "nlp/llama2_70b_lora" and pairs[0]["verdict"] == "regressed"
    tta = next(m for m in pairs[0]["metrics"] if m["name"] == "time_to_target_s")
    assert 1.3 < tta["ratio"] < 1.5
    warnings = " ".join(pairs[0]["warnings"])
    assert "precision fp8 (published) vs bf16 (candidate)" in warnings  # the published sw_notes say FP8 Training
    assert "global batch size" not in warnings  # AMD's logged global_batch_size is 8: the same

    fast = _candidates(tmp_path / "fast", time_per_step_s=0.40, precision="fp8", batch=16)
    p = _compare("--baseline", f"mlperf:{SYSTEM}", "--candidate", str(fast), "--published", str(published))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "improved" in p.stdout and "not like for like: global batch size 8 (published) vs 16 (candidate)" in p.stdout
    assert "precision" not in " ".join(ln for ln in p.stdout.splitlines() if "like for like" in ln)

    p = _compare("--baseline", "mlperf:AMD/nope", "--candidate", str(fast), "--published", str(published))
    assert p.returncode == 2 and "mlperf:AMD/nope" in p.stderr and SYSTEM in p.stderr

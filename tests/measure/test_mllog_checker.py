"""A real run's MLLOG passes the official MLPerf checker's common training rules (mlperf-logging, 6.1.0);
timestamps never go backwards; data staging and MLPerf's init limit are declared (the clock rules)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from pydantic import BaseModel, ConfigDict

from suite.data.base import TensorSplits
from suite.harness import RunRequest, run
from suite.measure.mllog import MLLogRecorder, check_common, parse
from suite.results.record import load_results
from suite.specload import load_spec

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = ("submission_org", "submission_division", "submission_platform", "submission_benchmark", "cache_clear",
            "train_samples", "eval_samples", "lowest_numerical_precision_in_linear",
            "lowest_numerical_precision_in_attn", "lowest_numerical_precision_in_comm", "tensor_parallelism",
            "pipeline_parallelism", "context_parallelism", "expert_parallelism", "micro_batch_size",
            "config_filename")


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "suite.cli", "run", "cv/digits_cnn", "--variant", "tiny", "--threads", "1",
         "--results", str(results), "--json", "--quiet", "--mlperf-org", "Example Org", "--mlperf-division",
         "closed"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    ((path, result),) = load_results(results, strict=True).results
    return path, result, path.parent / result.mllog


@pytest.mark.slow  # one ~15 s CLI run
def test_a_real_runs_log_passes_the_official_common_rules(cli_run):
    _, result, log = cli_run
    ok, messages = check_common(log)
    assert ok, "\n".join(messages)
    events = parse(log.read_text())
    value = {e["key"]: e["value"] for e in events}
    assert all(k in value for k in REQUIRED), [k for k in REQUIRED if k not in value]
    assert value["submission_org"] == "Example Org" and value["submission_division"] == "closed"
    assert value["submission_benchmark"] == "cv/digits_cnn"  # a "/" in the name: handled, not crashing
    assert value["lowest_numerical_precision_in_linear"] == "fp32" and value["micro_batch_size"] == 64
    assert value["config_filename"] == "digits_cnn.yaml"
    assert value["train_samples"] > value["eval_samples"] > 0
    assert value["tensor_parallelism"] == value["pipeline_parallelism"] == 1
    times = [e["time_ms"] for e in events]
    assert times == sorted(times)
    keys = [e["key"] for e in events]
    assert keys[-2:] == ["block_stop", "run_stop"] or keys[-1] == "run_stop"
    # the clock rules are declared in the result too
    assert result.clock["init_limit_s"] == 30 * 60 and result.clock["init_within_limit"] is True
    cache = next(e for e in events if e["key"] == "cache_clear")
    assert cache["metadata"]["data_staging_s"] == pytest.approx(result.clock["data_staging_s"])


@pytest.mark.slow  # shares the CLI run
def test_the_checker_fails_a_log_missing_a_required_key(cli_run, tmp_path):
    """The check is real: the same log without submission_org fails, naming the key."""
    _, _, log = cli_run
    bad = tmp_path / "bad.mllog"
    bad.write_text("".join(line + "\n" for line in log.read_text().splitlines() if '"submission_org"' not in line))
    ok, messages = check_common(bad)
    assert not ok and any("submission_org" in m for m in messages)


def test_bad_flags_are_refused_with_exit_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for flag, value in (("--mlperf-division", "sideways"), ("--attention-flops", "half")):
        out = subprocess.run([sys.executable, "-m", "suite.cli", "run", "cv/digits_cnn", flag, value, "--results",
                              str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and flag in out.stderr, out.stderr


def test_timestamps_never_go_backwards_and_the_last_block_closes_with_run_stop(monkeypatch):
    rec = MLLogRecorder("x/y")
    rec.init_start()
    rec.init_stop()
    rec.run_start()
    wall = time.time()
    monkeypatch.setattr(time, "time", lambda: wall - 3600.0)  # an NTP step back by an hour mid-run
    rec.eval_start(10, 80)
    rec.eval_stop(10, 80, "accuracy", {"accuracy": 0.5}, running=True)
    stop_ms = rec.now_ms()
    time.sleep(0.01)
    rec.run_stop("budget", 20, 160, time_ms=stop_ms)  # written later than the clock stopped
    events = parse(rec.text())
    times = [e["time_ms"] for e in events]
    assert times == sorted(times)
    assert [e["key"] for e in events[-2:]] == ["block_stop", "run_stop"]
    assert events[-2]["time_ms"] == events[-1]["time_ms"] == stop_ms


# ---- clock rules: a workload whose data loading takes a known extra time ---------------------------------

SLOW_LOAD_S = 0.4


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _SlowData:
    Config = _Cfg

    @staticmethod
    def load(cfg: _Cfg) -> TensorSplits:
        time.sleep(SLOW_LOAD_S)  # reading and decoding a data set that takes a known time
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(256, 8, generator=g), torch.randint(0, 2, (256,), generator=g)
        return TensorSplits(x, y, x[:64], y[:64], meta={"input_shape": (8,), "num_classes": 2})


class _Tiny:
    Config = _Cfg

    @staticmethod
    def build(cfg: _Cfg, meta: dict) -> torch.nn.Module:
        return torch.nn.Linear(8, 2)

    @staticmethod
    def flops_per_sample(cfg: _Cfg, meta: dict) -> float:
        return 3 * 2 * 8 * 2


DATA, MODEL = _SlowData(), _Tiny()


def test_data_staging_time_is_declared_in_the_result_and_the_log(tmp_path):
    me = __name__
    spec_path = tmp_path / "slow.yaml"
    spec_path.write_text(f"""
name: test/slow_data
domain: cv
version: 1
description: data loading takes a known extra time
task: image_classification
model: {{arch: "{me}:MODEL"}}
data: {{name: "{me}:DATA", batch_size: 32}}
optimizer: {{name: sgd, lr: 0.01}}
target: {{metric: accuracy, value: 1.01, mode: max, provenance: "never: the run ends at its step budget"}}
eval: {{every_steps: 5}}
budget: {{max_train_s: 60, max_steps: 5}}
tiers: [smoke]
""")
    result, path = run(RunRequest(spec=load_spec(spec_path), threads=1, results_dir=tmp_path / "r",
                                  measure_peak=False, spec_source=str(spec_path)))
    assert result.status == "budget", result.error
    clock = result.clock
    assert clock["data_staging_s"] >= SLOW_LOAD_S and clock["data_on_clock"] is False
    assert clock["data_staging_s"] <= result.init_s  # staged inside init, before run_start
    assert clock["init_limit_s"] == 240 * 60 and "open division" in clock["init_limit_rule"]
    events = parse((path.parent / result.mllog).read_text())
    cache = next(e for e in events if e["key"] == "cache_clear")
    assert cache["value"] is False and cache["metadata"]["data_staging_s"] >= SLOW_LOAD_S
    keys = [e["key"] for e in events]
    assert keys.index("cache_clear") < keys.index("run_start")
    assert check_common(path.parent / result.mllog)[0]


def test_submission_metadata_from_the_runner_environment(tmp_path):
    """A runner sets its organisation once (TRAINBENCH_MLPERF_ORG/DIVISION) instead of on every command."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINBENCH_MLPERF_DIVISION": "sideways"}
    out = subprocess.run([sys.executable, "-m", "suite.cli", "run", "cv/digits_cnn", "--results", str(tmp_path)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--mlperf-division 'sideways'" in out.stderr, out.stderr

"""veRL's trainer driven by the harness (suite/backends/verl/launch.py), on a machine without a GPU: the harness
prepares the run (model folder, parquet, the command line checked by veRL's own Hydra config), starts the trainer
as its child, follows the metrics log veRL's own FileLogger writes into the Result, stops the trainer at the
target, and records veRL's own failure as `error`. Where a GPU would be needed, the CUDA count is set to 1; the
trainer is either a stand-in that replays a veRL log (tests/support/verl_replay.py) or veRL's real main_ppo."""

from __future__ import annotations

import os
import re
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch

from suite import harness
from suite.backends.verl import backend as verl_backend
from suite.backends.verl import launch as verl_launch
from suite.backends.verl import options as verl_options
from suite.specload import load_spec

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "workloads" / "rl" / "arithmetic_grpo.yaml"
STEP = {"timing_s/gen": 1.0, "timing_s/reward": 0.1, "timing_s/old_log_prob": 0.2, "timing_s/update_actor": 0.3,
        "timing_s/update_weights": 0.05, "timing_s/step": 1.7, "perf/throughput": 500.0, "perf/mfu/actor": 0.02}
VAL = "val-core/trainbench/reward/mean@1"


@pytest.fixture
def one_gpu(monkeypatch):
    """A CUDA node with veRL's trainer installed, as far as the backend's checks can tell."""
    monkeypatch.setattr(verl_backend, "_cuda_count", lambda: 1)
    monkeypatch.setattr(verl_options, "_cuda_count", lambda: 1)  # where `supports` looks them up (torch-free)
    monkeypatch.setattr(verl_options, "TRAINER_MODULES", ())


def _verl_log(path: Path, records: list[tuple[int, dict]], monkeypatch) -> Path:
    """A metrics log written by veRL's own file logger (verl.utils.tracking.FileLogger)."""
    from verl.utils.tracking import FileLogger

    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = FileLogger("trainbench", "test")
    for step, data in records:
        logger.log(data, step)
    logger.finish()
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH")
    return path


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # another run's folder, gone
        return 0


def _run(tmp_path: Path, sets: dict | None = None):
    spec = load_spec(SPEC, sets or {}, "tiny")  # eval every 2 steps, 4 steps at most, target accuracy 0.6
    started = time.perf_counter()
    result, _ = harness.run(harness.RunRequest(spec=spec, backend="verl", results_dir=None, threads=1,
                                               measure_peak=False))
    return result, time.perf_counter() - started


def test_a_verl_log_becomes_the_result_and_the_trainer_is_stopped_at_the_target(tmp_path, monkeypatch, one_gpu):
    log = _verl_log(tmp_path / "src.jsonl", [(0, {VAL: 0.25}), (1, dict(STEP)),
                                             (2, {**STEP, "timing_s/testing": 0.4, VAL: 0.75}), (3, dict(STEP))],
                    monkeypatch)
    monkeypatch.setenv("TRAINBENCH_REPLAY", str(log))
    monkeypatch.setenv("TRAINBENCH_REPLAY_DELAYS", "0.05,0.05,0.05,60")  # step 3 would come a minute later
    monkeypatch.setattr(verl_launch, "MODULE", "verl_replay")
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests" / "support"))  # the trainer's environment comes from ours
    r, wall_s = _run(tmp_path)
    assert r.status == "reached", r.error
    assert r.phases["trainer_stopped_by_run"] and r.phases["trainer_exit_code"] == -15  # SIGTERM at the target
    assert wall_s < 50
    assert [p.metrics["accuracy"] for p in r.eval_curve] == [0.25, 0.75] and r.eval_curve[1].step == 2
    assert r.eval_curve[1].metrics[VAL] == 0.75 and r.eval_curve[1].metrics["mean_reward"] == 0.75
    assert r.steps == r.steps_to_target == 2 and r.samples == 2 * 4
    assert 0 < r.time_to_target_s <= r.total_s < 5 and r.init_s > 0.2  # veRL's start-up is init
    assert r.phases["source"] == "verl" and r.phases["updates"] == 2  # step 3 never came
    assert r.phases["seconds"]["gen"] == 2.0 and r.phases["seconds"]["update"] == 0.6
    assert r.phases["tokens_per_s_per_gpu"] == 500.0 and r.phases["startup_s"] > 0.2
    args = r.config["verl"]["args"]
    assert r.config["verl"]["module"] == "verl_replay" and "trainer.total_training_steps=4" in args
    assert r.backend == "verl" and r.parallel["framework"] == "verl"


@pytest.mark.parametrize("ending", ["budget", "interrupted"])
def test_the_trainer_is_stopped_with_the_run_at_its_budget_or_a_signal(tmp_path, monkeypatch, one_gpu, ending):
    """budget.max_train_s passes, or the run gets SIGTERM (a user's Ctrl-C; the launcher's death sets the same
    flag): the run ends so, and veRL's trainer, still writing, is stopped with it."""
    log = _verl_log(tmp_path / "src.jsonl", [(0, {VAL: 0.1}), (1, dict(STEP)), (2, dict(STEP))], monkeypatch)
    monkeypatch.setenv("TRAINBENCH_REPLAY", str(log))
    monkeypatch.setenv("TRAINBENCH_REPLAY_DELAYS", "0.05,0.05,60")
    monkeypatch.setattr(verl_launch, "MODULE", "verl_replay")
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests" / "support"))
    sets = {"budget.max_train_s": 1.0} if ending == "budget" else {}
    if ending == "interrupted":  # SIGTERM once the clock runs and the first validation is in the log
        def signal_when_started():
            deadline = time.monotonic() + 60
            while not any(_size(m) for m in Path(tempfile.gettempdir()).glob("trainbench-verl-*/metrics.jsonl")):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=signal_when_started, daemon=True).start()
    r, wall_s = _run(tmp_path, sets)
    assert r.status == ending and wall_s < 50, r.error
    assert r.phases["trainer_stopped_by_run"] and r.phases["trainer_exit_code"] == -15
    assert r.time_to_target_s is None and r.eval_curve[0].metrics["accuracy"] == 0.1


@pytest.mark.slow  # ~17 s of CPU: veRL's main_ppo imports its trainer (Ray, Megatron engines) before it fails
def test_verls_own_failure_is_recorded_as_an_error_naming_it(tmp_path, one_gpu):
    """veRL's real main_ppo, started with the command line the run composed, fails here (no GPU, and the modules
    its trainer imports beyond the plain wheel): the run is an `error` carrying veRL's own last lines."""
    r, _ = _run(tmp_path)
    assert r.status == "error" and r.time_to_target_s is None
    # the reason first (the last exception line veRL printed), then its output: on this venv its trainer stops at
    # an import the plain wheel does not bring (cachetools); with that installed, at "Total available GPUs 0"
    said = re.search(r"veRL's trainer \(python -m verl\.trainer\.main_ppo\) exited with code 1 [^:]*: (.*);", r.error)
    assert said and re.match(r"\w*(Error|Exception)", said[1]), r.error[:500]
    assert said[1] in r.error.split("its last output:")[1] and "Traceback" in r.error


def test_device_check_runs_the_grpo_tiny_variant_under_verl_with_its_phases(tmp_path, monkeypatch, one_gpu):
    """benchmarks/device_check.py's row for veRL (what a CUDA node with veRL and vLLM records): a few steps, veRL's
    phases beside, no FLOPs cross-check of the suite's own model."""
    import argparse
    import importlib.util

    log = _verl_log(tmp_path / "src.jsonl", [(0, {VAL: 0.1}), *((s, dict(STEP)) for s in range(1, 5))], monkeypatch)
    monkeypatch.setenv("TRAINBENCH_REPLAY", str(log))
    monkeypatch.setenv("TRAINBENCH_REPLAY_DELAYS", "0.02")
    monkeypatch.setattr(verl_launch, "MODULE", "verl_replay")
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests" / "support"))
    spec = importlib.util.spec_from_file_location("device_check", ROOT / "benchmarks" / "device_check.py")
    dc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dc)
    args = argparse.Namespace(set_json={}, steps=20, run_limit_s=60.0, precision=None, compile=False, threads=1,
                              device_bytes=None)
    row = dc.one_run("rl/arithmetic_grpo", "verl", args, "cpu")
    assert row["status"] == "budget" and row["steps"] == row["steps_asked"] == dc.VERL_STEPS == 4, row.get("error")
    assert row["phases"]["source"] == "verl" and row["phases"]["updates"] == 4 and "flops" not in row
    assert row["phases"]["seconds"]["gen"] == 4.0 and row["verl"]["init_s"] > 0
    assert row["phases"]["trainer_exit_code"] == 0 and not row["phases"]["trainer_stopped_by_run"]  # it ended itself

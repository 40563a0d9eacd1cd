"""Issue 48 point 1: the wall-clock account (Result.goodput) of real runs on real digits.

The parts are timed inside the run; the checks time the run from outside (the caller's own perf_counter around
the whole run, the kernel's record of a child's process start), so a second counted twice or missed fails them.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite import harness
from suite.measure import goodput
from suite.results.record import SCHEMA_VERSION, parse_result, read_result
from suite.specload import load_spec

ROOT = Path(__file__).resolve().parents[2]


def _run(digits_path: Path, tmp_path: Path, overrides: dict | None = None) -> tuple[harness.Run, object, float]:
    spec = load_spec(digits_path, overrides or {}, "tiny")
    req = harness.RunRequest(spec=spec, results_dir=tmp_path, threads=1, measure_peak=False, overrides=overrides or {})
    t_out = time.perf_counter()
    the_run = harness.Run(req)
    result = the_run.execute()
    outside_s = time.perf_counter() - t_out
    return the_run, result, outside_s


def test_the_parts_add_up_to_the_wall_time_measured_from_outside(digits_path, tmp_path):
    _, result, outside_s = _run(digits_path, tmp_path)
    g = result.goodput
    assert result.status == "budget" and g is not None
    assert list(g.parts_s) == list(goodput.PARTS)
    assert all(v >= 0 for v in g.parts_s.values()), g.parts_s
    total = math.fsum(g.parts_s.values())
    # the account closes inside execute(), a moment before the caller's clock stops: never after it
    assert total <= outside_s
    assert total == pytest.approx(outside_s, rel=0.01)
    assert abs(g.unaccounted_s) <= 0.01 * g.wall_s
    # the parts agree with the record's own fields where both measure the same thing
    assert g.parts_s["eval_s"] >= result.eval_s
    assert g.parts_s["init_s"] >= result.init_s
    on_clock = sum(g.parts_s[p] for p in ("compile_s", "steps_s", "data_wait_s", "eval_s", "other_s"))
    assert on_clock == pytest.approx(result.total_s, rel=0.01)
    assert g.goodput == pytest.approx(g.parts_s["steps_s"] / g.wall_s)
    assert g.startup_from.startswith("harness entry") and g.parts_s["startup_s"] == 0.0


def test_a_stalled_loader_shows_as_data_wait_within_ten_percent(digits_path, tmp_path):
    # two stalls of 1 s (before batches 2 and 22 of 40): long sleeps, so a busy host's wake-up delay is small beside
    overrides = {"faults.stall_loader_s": 1.0, "faults.stall_at_step": 2, "faults.stall_every": 20}
    the_run, result, _ = _run(digits_path, tmp_path, overrides)
    g = result.goodput
    assert the_run.faults.stalled_s == 2.0
    assert g.parts_s["data_wait_s"] == pytest.approx(2.0, rel=0.10)
    assert result.throughput["data_wait_fraction"] > 0.2
    # the stall is waiting, not computing: the settled step time stays that of a step
    assert g.settled_step_s is not None and g.settled_step_s < 0.5


def test_compilation_is_the_first_steps_excess_over_the_settled_step():
    k, settled_s = goodput.settled([2.0, 0.5, 0.011, 0.010, 0.012, 0.010, 0.009, 0.010])
    assert k == 2 and settled_s == pytest.approx(0.010)
    acc = goodput.Account(launched=False)
    acc.step_compute_s = [2.0, 0.5, 0.011, 0.010, 0.012, 0.010, 0.009, 0.010]
    g = acc.close()
    assert g.parts_s["compile_s"] == pytest.approx(2.0 + 0.5 - 2 * 0.010)
    assert g.parts_s["steps_s"] == pytest.approx(sum(acc.step_compute_s) - g.parts_s["compile_s"])
    assert goodput.settled([0.01] * 6) == (0, 0.01)  # nothing to compile: no step is warm-up


def test_a_schema_2_file_reads_with_no_account_and_is_not_rewritten(digits_path, tmp_path):
    _, result, _ = _run(digits_path, tmp_path)
    data = json.loads(result.model_dump_json())
    data["schema_version"] = 2
    del data["goodput"]
    old = tmp_path / "v2.json"
    text = json.dumps(data)
    old.write_text(text)
    read = read_result(old)
    assert read.schema_version == SCHEMA_VERSION == 3 and read.goodput is None
    assert old.read_text() == text  # read, never rewritten
    data["goodput"] = {"wall_s": 1.0}  # a v2 file never had one: the migration does not invent or keep it
    assert parse_result(json.dumps(data), "x").goodput is None


@pytest.mark.slow
def test_a_launched_run_accounts_from_its_process_start(digits_path, tmp_path):
    """`trainbench run` (an isolated child): start-up is measured from the kernel's record of the process start."""
    t_out = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "suite.cli", "run", str(digits_path), "--variant", "tiny",
                           "--results", str(tmp_path), "--quiet", "--threads", "1"],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)
    outside_s = time.perf_counter() - t_out
    assert proc.returncode == 0, proc.stderr[-2000:]
    (path,) = tmp_path.rglob("*.json")
    g = read_result(path).goodput
    assert g is not None and g.startup_from == "process start"
    assert g.parts_s["startup_s"] > 0
    assert math.fsum(g.parts_s.values()) == pytest.approx(g.wall_s, rel=0.01)
    assert g.wall_s < outside_s  # the child started after the command and recorded before it ended


def test_throughput_mode_accounts_its_warm_up_as_compilation(digits_path, tmp_path):
    spec = load_spec(digits_path, {"throughput.warmup_steps": 5, "throughput.measure_steps": 30}, "tiny")
    req = harness.RunRequest(spec=spec, results_dir=None, threads=1, measure_peak=False, mode="throughput")
    t_out = time.perf_counter()
    the_run = harness.Run(req)
    result = the_run.execute()
    outside_s = time.perf_counter() - t_out
    g = result.goodput
    assert result.status == "measured"
    assert g.parts_s["steps_s"] == pytest.approx(result.train_s)  # the timed steps, each counted once
    assert g.parts_s["compile_s"] > 0 and g.parts_s["other_s"] >= 0
    assert math.fsum(g.parts_s.values()) == pytest.approx(outside_s, rel=0.01)

"""Data parallel on CPU: `trainbench run --nproc 2` under torchrun + gloo, one result written by rank 0."""

from __future__ import annotations

import json
import subprocess

import pytest
from support.backend_util import env as subprocess_env
from support.backend_util import run_hang_guard_s, set_flags
from support.faults import cli
from support.tests_paths import DIGITS

from suite import harness
from suite.results.record import read_result
from suite.specload import load_spec

# both runs must reach the target: a wall budget a loaded machine cannot exhaust (under a full CPU hog the spec's
# 60 s ended the two-process run first); the step budget still ends a run that does not converge
SETS = {"budget.max_train_s": 600}
GUARD_S = run_hang_guard_s(DIGITS, SETS)


@pytest.mark.slow
@pytest.mark.timeout(int(GUARD_S) + 600)  # the child's guard, then the one-process run in this process
def test_two_process_ddp_matches_single_process(tmp_path):
    p = subprocess.run(cli("run", "cv/digits_cnn", "--nproc", "2", *set_flags(SETS), "--results", str(tmp_path), "--json"),
                       capture_output=True, text=True, env=subprocess_env(), timeout=GUARD_S)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = json.loads(p.stdout[p.stdout.index("["):])
    assert len(rows) == 1  # only rank 0 writes and reports
    files = list(tmp_path.rglob("*.json"))
    assert len(files) == 1
    ddp = read_result(files[0])
    assert ddp.world_size == 2 and ddp.parallel["dp"] == 2 and ddp.status == "reached"
    # each rank takes half of every global batch: the run is the same optimisation as one process
    single, _ = harness.run(harness.RunRequest(spec=load_spec(DIGITS, SETS), results_dir=None, threads=1))
    assert single.status == "reached"
    assert ddp.steps_to_target == single.steps_to_target
    for a, b in zip(ddp.eval_curve, single.eval_curve, strict=True):
        assert a.metrics["accuracy"] == pytest.approx(b.metrics["accuracy"], abs=1 / 360 + 1e-9)

"""Data parallel on CPU: `trainbench run --nproc 2` under torchrun + gloo, one result written by rank 0."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import cli, subprocess_env
from tests_paths import DIGITS

from suite import harness
from suite.results import read_result
from suite.specload import load_spec


@pytest.mark.slow
def test_two_process_ddp_matches_single_process(tmp_path):
    p = subprocess.run(cli("run", "cv/digits_cnn", "--nproc", "2", "--results", str(tmp_path), "--json"),
                       capture_output=True, text=True, env=subprocess_env(), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = json.loads(p.stdout[p.stdout.index("["):])
    assert len(rows) == 1  # only rank 0 writes and reports
    files = list(tmp_path.rglob("*.json"))
    assert len(files) == 1
    ddp = read_result(files[0])
    assert ddp.world_size == 2 and ddp.parallel["dp"] == 2 and ddp.status == "reached"
    # each rank takes half of every global batch: the run is the same optimisation as one process
    single, _ = harness.run(harness.RunRequest(spec=load_spec(DIGITS), results_dir=None, threads=1))
    assert ddp.steps_to_target == single.steps_to_target
    for a, b in zip(ddp.eval_curve, single.eval_curve, strict=True):
        assert a.metrics["accuracy"] == pytest.approx(b.metrics["accuracy"], abs=1 / 360 + 1e-9)

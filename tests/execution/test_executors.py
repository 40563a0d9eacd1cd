"""Executors: `--executor local --jobs N` and `--executor ray` run real training and lose no run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.promised import require

from suite import registry
from suite.execution import launch
from suite.execution.pool import threads_per_job
from suite.harness import RunRequest
from suite.results.record import load_results, write_result
from suite.specload import load_spec

ROOT = Path(__file__).resolve().parents[2]
PATHS = os.pathsep.join([str(ROOT), str(ROOT / "tests")])  # this checkout, and tests/ for `support.*` tasks
ENV = {**os.environ, "PYTHONPATH": PATHS}


def _fault_spec(tmp_path: Path, name: str, task: str) -> Path:
    """A copy of digits_cnn (tiny) whose task fails on the worker in the given way."""
    text = (ROOT / "workloads/cv/digits_cnn.yaml").read_text()
    text = text.replace("name: cv/digits_cnn", f"name: cv/{name}").replace(
        "task: image_classification", f"task: {task}")
    path = tmp_path / "workloads" / "cv" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def execute(reqs: list[RunRequest], executor: str, jobs: int = 1) -> list:
    return [o.result for o in launch.launch(reqs, launch.Options(executor=executor, jobs=jobs, quiet=True))]


def _req(path: Path, seed: int, variant: str | None = "tiny", threads: int | None = None) -> RunRequest:
    return RunRequest(spec=load_spec(path, variant=variant), seed=seed, variant=variant, threads=threads,
                      results_dir=None, spec_source=str(path))


def test_threads_are_cores_over_jobs():
    assert threads_per_job(2, cores=8) == 4
    assert threads_per_job(3, cores=8) == 2
    assert threads_per_job(16, cores=8) == 1


@pytest.mark.slow
def test_local_jobs_cli_runs_seeds_in_parallel_processes(tmp_path):
    res = tmp_path / "res"
    proc = subprocess.run(
        [sys.executable, "-m", "suite.cli", "run", "cv/digits_cnn", "--variant", "tiny", "--seeds", "2",
         "--executor", "local", "--jobs", "2", "--results", str(res), "--json"],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert sorted(r["seed"] for r in rows) == [0, 1]
    loaded = load_results(res)
    assert not loaded.errors
    results = [r for _, r in loaded.results]
    assert sorted(r.seed for r in results) == [0, 1]
    assert all(r.status in ("reached", "budget") and r.steps > 0 for r in results)
    # threads = cores / jobs, recorded in each result's config
    expected = threads_per_job(2)
    assert {r.config["threads"] for r in results} == {expected}


@pytest.mark.slow
def test_local_worker_crash_and_raise_are_recorded_not_lost(tmp_path):
    crash = _fault_spec(tmp_path, "fault_crash", "support.faults:CrashingTask")
    raising = _fault_spec(tmp_path, "fault_raise", "support.faults:MissingDataTask")
    good = ROOT / "workloads/cv/digits_cnn.yaml"
    reqs = [_req(crash, 0), _req(good, 0), _req(raising, 0)]
    results = list(execute(reqs, "local", jobs=2))
    by_name = {r.workload: r for r in results}
    assert len(results) == 3 and set(by_name) == {"cv/fault_crash", "cv/digits_cnn", "cv/fault_raise"}
    assert by_name["cv/fault_crash"].status == "error"
    assert "exited with code 3" in by_name["cv/fault_crash"].error
    assert by_name["cv/fault_raise"].status == "error"
    assert "DataMissing" in by_name["cv/fault_raise"].error
    assert by_name["cv/digits_cnn"].status in ("reached", "budget")  # the crash next to it did not hurt it
    for r in results:
        write_result(tmp_path / "res", r)
    assert len(load_results(tmp_path / "res").results) == 3


def test_ray_resource_requests():
    from suite.execution.ray import resources_for

    spec = load_spec(ROOT / "workloads/cv/digits_cnn.yaml")
    assert resources_for(RunRequest(spec=spec, backend="npu"), {"CPU": 8, "NPU": 8}) == {
        "num_cpus": 1, "resources": {"NPU": 1}}
    assert resources_for(RunRequest(spec=spec), {"CPU": 32, "GPU": 8}) == {"num_cpus": 1, "num_gpus": 1}
    assert resources_for(RunRequest(spec=spec, threads=4), {"CPU": 2}) == {"num_cpus": 2}
    assert resources_for(RunRequest(spec=spec, threads=1), {"CPU": 2}) == {"num_cpus": 1}
    # a run of several processes is one task: all its ranks land on one node
    assert resources_for(RunRequest(spec=spec, threads=1), {"CPU": 8}, nproc=2) == {"num_cpus": 2}
    assert resources_for(RunRequest(spec=spec), {"CPU": 32, "GPU": 8}, nproc=4) == {"num_cpus": 1, "num_gpus": 4}


# ---- Ray: one local 2-CPU cluster for this module ----------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster(ray_alone, tmp_path_factory):
    ray = require("ray")
    saved = os.environ.get("PYTHONPATH")
    # the raylet and its workers inherit this environment: they must import this worktree's `suite`
    os.environ["PYTHONPATH"] = PATHS + os.pathsep + (saved or "")
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _temp_dir=str(tmp_path_factory.mktemp("ray")),
                 runtime_env={"env_vars": {"PYTHONPATH": PATHS}})
        yield ray
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


@pytest.mark.slow
def test_ray_smoke_tier_writes_every_result_and_records_failures(ray_cluster, tmp_path):
    smoke = [p for p in registry.workload_files().values() if "smoke" in load_spec(p).tiers]
    assert smoke, "the smoke tier is empty"
    reqs = []
    for path in smoke:
        variant = "tiny" if "tiny" in load_spec(path).variants else None
        reqs.append(_req(path, 0, variant))  # one seed each keeps the tier within the CI budget
    raising = _fault_spec(tmp_path, "fault_raise", "support.faults:MissingDataTask")
    reqs.append(_req(raising, 0))
    res = tmp_path / "res"
    for result in execute(reqs, "ray"):
        write_result(res, result)
    loaded = load_results(res)
    assert not loaded.errors
    got = sorted((r.workload, r.seed) for _, r in loaded.results)
    assert got == sorted((q.spec.name, q.seed) for q in reqs)  # every run has its result, none lost
    statuses = {(r.workload, r.seed): r for _, r in loaded.results}
    failed = statuses[("cv/fault_raise", 0)]
    assert failed.status == "error" and "DataMissing" in failed.error
    for (name, _), r in statuses.items():
        if name != "cv/fault_raise":
            assert r.status in ("reached", "budget"), (name, r.status, r.error)


@pytest.mark.slow
def test_ray_executor_from_the_cli(ray_cluster, tmp_path):
    from typer.testing import CliRunner

    from suite.cli import app

    res = tmp_path / "res"
    out = CliRunner().invoke(app, ["run", "cv/digits_cnn", "--variant", "tiny", "--seeds", "2",
                                   "--executor", "ray", "--results", str(res), "--json", "--quiet"])
    assert out.exit_code == 0, out.output
    loaded = load_results(res)
    assert sorted(r.seed for _, r in loaded.results) == [0, 1]


def test_address_without_ray_is_a_clear_error():
    proc = subprocess.run(
        [sys.executable, "-m", "suite.cli", "run", "cv/digits_cnn", "--executor", "local", "--address", "x:1"],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120,
    )
    assert proc.returncode == 2 and "--address is for --executor ray" in proc.stderr

"""The launcher seam's own promises: --fail-fast under every local launcher, progress that cannot end a run,
one GEMM measurement per invocation, and launcher flags that are refused with the reason."""

from __future__ import annotations

import json
import subprocess

import pytest
from test_faults_lib import ROOT, cli, env, json_rows, sh, write_spec

from suite.execution import launch
from suite.results import load_results


@pytest.mark.slow
@pytest.mark.parametrize("executor", [["--executor", "local", "--jobs", "2"], ["--executor", "inline"]])
def test_fail_fast_stops_starting_runs_and_stops_those_in_flight(tmp_path, executor):
    slow = write_spec(tmp_path, "slow", "none", steps=100_000, sleep_s=0.05, **{"budget.max_train_s": 300,
                                                                               "target.value": 1.5})
    fails = write_spec(tmp_path, "fails", "raise", at_step=3)
    never = write_spec(tmp_path, "never", "none")
    order = [slow, fails, never] if executor[1] == "local" else [fails, slow, never]
    p = sh("run", *map(str, order), "--results", str(tmp_path / "res"), "--json", "--threads", "1",
           "--fail-fast", *executor, timeout=600)
    assert p.returncode == 1, p.stderr[-3000:]
    by = {r["error"] and r["status"]: r for r in json_rows(p.stdout)}
    statuses = sorted(r["status"] for r in json_rows(p.stdout))
    if executor[1] == "local":  # `slow` was in flight beside `fails`: stopped and recorded, `never` never started
        assert statuses == ["error", "interrupted"], by
    else:  # one at a time: nothing after the failure starts
        assert statuses == ["error"], by
    names = {r.config["spec_source"].rsplit("/", 1)[1] for _, r in load_results(tmp_path / "res").results}
    assert "never.yaml" not in names


@pytest.mark.slow
def test_a_closed_stderr_cannot_end_a_run(tmp_path):
    spec = write_spec(tmp_path, "quiet_reader", "none", steps=30, sleep_s=0.02)
    proc = subprocess.Popen(cli("run", str(spec), "--results", str(tmp_path / "res"), "--json", "--threads", "1"),
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    proc.stderr.close()  # nobody reads the progress lines: every write to stderr now fails with EPIPE
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-2000:]
    (row,) = json.loads(out[out.index(b"["):])
    assert row["status"] in ("budget", "reached") and row["steps"] == 30


@pytest.mark.slow
def test_the_gemm_peak_is_measured_once_per_invocation(tmp_path):
    spec = write_spec(tmp_path, "two_seeds", "none", steps=3)
    p = sh("run", str(spec), "--seeds", "3", "--results", str(tmp_path / "res"), "--json", "--threads", "1")
    assert p.returncode == 0, p.stderr[-3000:]
    peaks = {(r.peak.measured_flops_per_s, r.peak.measured_gemm_n) for _, r in load_results(tmp_path / "res").results}
    assert len(peaks) == 1  # three runs, one measurement (a second measurement never repeats a float exactly)


@pytest.mark.parametrize("flags, message", [
    (["--executor", "slurm"], "--executor 'slurm': expected one of inline, local, ray"),
    (["--executor", "local", "--address", "x:1"], "--address is for --executor ray"),
    (["--executor", "local", "--no-isolate"], "--no-isolate runs in this process"),
])
def test_launcher_flags_are_refused_with_the_reason(flags, message, tmp_path):
    p = sh("run", "cv/digits_cnn", "--variant", "tiny", "--results", str(tmp_path / "res"), *flags)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").rglob("*.json"))


def test_every_launcher_is_one_module_and_one_line():
    for name, ref in launch.LAUNCHERS.items():
        module, _, attr = ref.partition(":")
        cls = getattr(__import__(module, fromlist=[attr]), attr)
        assert cls.name == name and callable(cls.run)

"""The launcher seam's own promises: --fail-fast under every local launcher, progress that cannot end a run,
one GEMM measurement per invocation, and launcher flags that are refused with the reason."""

from __future__ import annotations

import json
import subprocess

import pytest
from support.faults import ROOT, cli, env, json_rows, sh, write_spec

from suite.execution import forkserver, launch
from suite.results.record import load_results


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
    (["--executor", "kubernetes"], "--executor 'kubernetes': expected one of inline, local, ray, slurm"),
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


def test_run_starts_the_fork_server_before_it_imports_torch_with_the_suites_modules(tmp_path):
    """Start-up (issue 13): `trainbench run` starts the fork server before the driver imports torch (reading
    the specs does, ~3 s), so the server's imports (torch, the harness, the suite's modules, ~5 s) run on the
    other core meanwhile. Observed with an import hook in the driver; the run is then refused (an unwritable
    results folder) so that the test stays short."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code = f"""
import sys
from multiprocessing import forkserver as mpf
seen = []
class Hook:
    def find_spec(self, name, path, target=None):
        if name == "torch" and not seen:
            seen.append(mpf._forkserver._forkserver_pid)
            print("preload", ",".join(mpf._forkserver._preload_modules or []), flush=True)
        return None
sys.meta_path.insert(0, Hook())
sys.argv = ["trainbench", "run", "cv/digits_cnn", "nlp/topics_gpt", "--results", {str(blocker / "res")!r}]
from suite.cli import app  # not main(): the entry point leaves with os._exit, before this `finally` could print
try:
    app()
finally:
    print("server at first torch import", seen, flush=True)
"""
    p = subprocess.run([*cli()[:1], "-c", code], capture_output=True, text=True, env=env(), cwd=ROOT, timeout=300)
    assert p.returncode == 2 and "--results" in p.stderr, p.stderr[-3000:]
    line = next(x for x in p.stdout.splitlines() if x.startswith("server at first torch import"))
    assert "None" not in line and "[]" not in line, (line, "torch was imported before the fork server started")
    mods = next(x for x in p.stdout.splitlines() if x.startswith("preload")).split()[1].split(",")
    assert mods[:4] == forkserver.PRELOAD
    assert {"suite.workloads.image_classification", "suite.workloads.language_model", "suite.models.gpt.model",
            "suite.data.vision.digits", "suite.backends.torch.backend"} <= set(mods), mods
    assert not any(m.startswith(("suite.backends.deepspeed.backend", "suite.backends.megatron.backend")) for m in mods), mods


def test_no_fork_server_is_started_for_a_cold_start_or_a_multi_process_run():
    assert launch._launcher_name(launch.Options(executor="local")) == "pool"
    for opts in (launch.Options(warm=False), launch.Options(nproc=2), launch.Options(isolate=False),
                 launch.Options(executor="ray")):
        code = ("from suite.execution import launch, plan\n"
                "from multiprocessing import forkserver as mpf\n"
                f"assert not launch.prewarm('torch', launch.{opts!r})\n"
                "assert mpf._forkserver._forkserver_pid is None\n")
        p = subprocess.run([*cli()[:1], "-c", code], capture_output=True, text=True, env=env(), cwd=ROOT, timeout=120)
        assert p.returncode == 0, (opts, p.stderr[-2000:])


def test_a_run_refused_after_the_fork_server_started_leaves_no_process(tmp_path):
    """The fork server starts before the device checks; a refusal after that (here: an unwritable results
    folder) ends it with the driver instead of leaving it importing torch for seconds."""
    import psutil

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    proc = subprocess.Popen(cli("run", "cv/digits_cnn", "--results", str(blocker / "res")), env=env(), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kids: set[int] = set()
    while proc.poll() is None:  # every process the driver starts, seen while it lives
        try:
            kids |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            break
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "--results" in stderr, stderr[-2000:]
    assert kids, "no fork server was started before the refusal: the test no longer tests anything"
    procs = []
    for pid in kids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=10)  # multiprocessing's resource tracker ends on its own, at once
    assert not alive, [(p.pid, p.cmdline()) for p in alive]

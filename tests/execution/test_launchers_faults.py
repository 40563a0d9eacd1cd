"""The fault suite, once, under every launcher: inline, a pool of 2 jobs, Ray on a local 2-CPU instance, a study,
and Slurm (a real one-node cluster: the in-run faults and a dead rank; the driver's own signals and death, whose
contract differs under Slurm, are tests/execution/test_slurm.py's).

Each case injects one fault (a hang in a C call, a hang holding the GIL, a crash, NaN, OOM, a SIGKILLed
worker, a dead rank, SIGTERM / SIGINT / SIGKILL to the driver) and checks, under each launcher, that the run
ends with the right recorded status, that the record appeared within the case's window (its watchdog
window, or none) plus a margin after the fault fired, and that no process of the invocation is left.

The in-run faults of one launcher share one invocation (they are independent runs of one `run` or one
study), so the whole matrix costs about twenty invocations, not forty.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.faults import ROOT, cli, env, wait_for, write_spec

from suite.execution.isolated import WEDGED_MARGIN_S
from suite.results.record import load_results

pytestmark = pytest.mark.slow

MARGIN_S = 45.0  # process teardown and a fallback write on a loaded 2-core machine; windows are far larger
BATCH_GUARD_S = 900  # the hang guard of one launcher's batch of in-run faults (run within its first case)
LAUNCHERS = ["inline", "pool", "ray", "study", "slurm"]

# case -> (write_spec kwargs, status, text in the error, window in seconds after the fault fires)
IN_RUN: dict[str, tuple[dict[str, Any], str, str, float]] = {
    "hang_c": ({"fault": "hang", "budget.watchdog_s": 3}, "error", "timeout: no training step", 3),
    "hang_gil": ({"fault": "hang_gil", "budget.watchdog_s": 1}, "error", "watchdog could not run",
                 1 + WEDGED_MARGIN_S),
    "crash": ({"fault": "segv"}, "error", "killed by SIGSEGV", 0),
    "nan": ({"fault": "nan"}, "diverged", "non-finite loss", 0),
    "oom": ({"fault": "oom"}, "error", "out of memory", 0),
    "worker_sigkill": ({"fault": "sigkill"}, "error", "killed by SIGKILL", 0),
}
DRIVER = {"sigterm": signal.SIGTERM, "sigint": signal.SIGINT, "parent_sigkill": signal.SIGKILL}
CASES = [*IN_RUN, "dead_rank", *DRIVER]
# (launcher, case): the driver's own signals and death under Slurm, whose contract differs (its jobs outlive a
# killed driver), are tests/execution/test_slurm.py's
PAIRS = [(launcher, case) for launcher in LAUNCHERS for case in CASES if not (launcher == "slurm" and case in DRIVER)]
# Ray on loopback only (it would otherwise publish this machine's outbound address), with a token of its own
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex}
# every process of this module's Ray head inherits this tag, so teardown stops this head and nothing else:
# `ray stop --force` would kill every Ray instance on the machine, the session's in-process driver included,
# and a driver whose raylet dies ends its process (here: pytest itself, with exit code 1 and no summary)
RAY_HEAD_TAG = uuid.uuid4().hex


def _env(**extra: str) -> dict[str, str]:
    return env(**RAY_ENV, **extra)


# ---- a local Ray instance (2 CPUs) for the whole module -------------------------------------------------


@pytest.fixture(scope="module")
def ray_address(ray_alone, tmp_path_factory) -> Any:
    ray_bin = Path(sys.executable).with_name("ray")
    assert ray_bin.exists(), "ray is a dev dependency: `make install` installs it"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tmp_path_factory.mktemp("ray")
    e = _env(TB_RAY_HEAD=RAY_HEAD_TAG)
    start = subprocess.run([str(ray_bin), "start", "--head", "--num-cpus=2", f"--port={port}",
                            "--node-ip-address=127.0.0.1", "--include-dashboard=false", f"--temp-dir={temp}",
                            "--disable-usage-stats"], env=e, capture_output=True, text=True, timeout=300)
    assert start.returncode == 0, start.stderr[-3000:]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        _stop_tagged("TB_RAY_HEAD", RAY_HEAD_TAG)


# ---- helpers ----------------------------------------------------------------------------------------------


def _stop_tagged(name: str, tag: str, grace_s: float = 15.0) -> None:
    """SIGTERM every live process whose environment carries name=tag, then SIGKILL what is left after grace_s."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in _tagged(tag, name):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while _tagged(tag, name) and time.monotonic() < deadline:
            time.sleep(0.2)


def _tagged(tag: str, name: str = "TB_FAULT_TAG") -> list[int]:
    """Processes whose environment carries this invocation's tag (the driver, its children, torchrun, ranks)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            environ = (d / "environ").read_bytes()
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"{name}={tag}".encode() in environ.split(b"\0") and state not in ("Z", "X") and int(d.name) != os.getpid():
            pids.append(int(d.name))
    return pids


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def _assert_nothing_left(tag: str, ready: list[Path]) -> None:
    pids = [int(p.read_text()) for p in ready if p.exists() and p.read_text().strip()]
    deadline = time.monotonic() + MARGIN_S
    while time.monotonic() < deadline and (_tagged(tag) or not all(map(_gone, pids))):
        time.sleep(0.5)
    assert not _tagged(tag), f"processes left behind: {_tagged(tag)}"
    assert all(map(_gone, pids)), f"a faulting worker is still running: {[p for p in pids if not _gone(p)]}"


def _command(launcher: str, specs: list[Path], results: Path, folder: Path, address: str | None,
             nproc: int = 1) -> list[str]:
    common = ["--results", str(results), "--threads", "1"]
    if launcher == "study":
        study = folder / "study.yaml"
        study.write_text(yaml.safe_dump({"name": "faults", "workloads": [str(p) for p in specs],
                                         "algorithms": ["sgd"], "seeds": 1}))
        return cli("study", str(study), "--out", str(folder / "out"), "--json", *common,
                   *(["--nproc", str(nproc)] if nproc > 1 else []))
    executor = {"inline": ["--executor", "inline"], "pool": ["--executor", "local", "--jobs", "2"],
                "ray": ["--executor", "ray", "--address", address or ""],
                "slurm": ["--executor", "slurm", "--slurm", "outcome_grace_s=2", "--slurm", "poll_s=0.5"]}[launcher]
    return cli("run", *map(str, specs), "--json", *executor, *common, *(["--nproc", str(nproc)] if nproc > 1 else []))


def _records(results: Path) -> dict[str, Any]:
    loaded = load_results(results)
    assert loaded.errors == []
    return {Path(r.config["spec_source"]).stem: (path, r) for path, r in loaded.results}


_batches: dict[str, dict[str, Any]] = {}


def _in_run_batch(launcher: str, tmp_root: Path, address: str | None) -> dict[str, Any]:
    """Every in-run fault as one invocation of this launcher (run once, shared by the cases)."""
    if launcher in _batches:
        return _batches[launcher]
    folder = tmp_root / f"batch-{launcher}"
    folder.mkdir(parents=True)
    specs = []
    for case, (kw, *_rest) in IN_RUN.items():
        kw = dict(kw)
        fault = kw.pop("fault")
        specs.append(write_spec(folder, case, fault, at_step=3, ready_file=str(folder / f"{case}.{{rank}}.ready"),
                                **kw))
    tag = uuid.uuid4().hex
    proc = subprocess.run(_command(launcher, specs, folder / "res", folder, address), env=_env(TB_FAULT_TAG=tag),
                          capture_output=True, text=True, timeout=BATCH_GUARD_S, cwd=ROOT)
    _batches[launcher] = {"proc": proc, "folder": folder, "tag": tag}
    _batches[launcher]["records"] = _records(folder / "res")
    return _batches[launcher]


# ---- the suite ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(int(BATCH_GUARD_S + MARGIN_S) + 120)  # above the batch's guard (pyproject's 600 s was below)
@pytest.mark.parametrize("launcher, case", PAIRS, ids=[f"{launcher}-{case}" for launcher, case in PAIRS])
def test_fault_is_recorded_under_every_launcher(launcher, case, tmp_path_factory, request, monkeypatch):
    address = request.getfixturevalue("ray_address") if launcher == "ray" else None
    if launcher == "slurm":  # a real one-node Slurm (tests/support/slurm_cluster.py); the CLI finds it by SLURM_CONF
        for key, value in request.getfixturevalue("slurm_cluster").env.items():
            monkeypatch.setenv(key, value)
    root = tmp_path_factory.getbasetemp() / "launcher-faults"
    if case in IN_RUN:
        _in_run_case(launcher, case, root, address)
    elif case == "dead_rank":
        _dead_rank_case(launcher, tmp_path_factory.mktemp(f"rank-{launcher}"), address)
    else:
        _driver_case(launcher, case, tmp_path_factory.mktemp(f"{case}-{launcher}"), address)


def _in_run_case(launcher: str, case: str, root: Path, address: str | None) -> None:
    batch = _in_run_batch(launcher, root, address)
    proc, folder = batch["proc"], batch["folder"]
    assert proc.returncode == 1, proc.stderr[-3000:]  # some runs failed, the invocation went on to the end
    assert set(batch["records"]) == set(IN_RUN), proc.stderr[-3000:]  # one record per run: none lost
    _, status, text, window = IN_RUN[case]
    path, result = batch["records"][case]
    assert result.status == status and text in (result.error or ""), (case, result.status, result.error)
    fired = (folder / f"{case}.0.ready").stat().st_mtime
    took = path.stat().st_mtime - fired
    assert took <= window + MARGIN_S, f"{case}: recorded {took:.1f} s after the fault (window {window} s)"
    _assert_nothing_left(batch["tag"], list(folder.glob("*.ready")))


def _dead_rank_case(launcher: str, folder: Path, address: str | None) -> None:
    spec = write_spec(folder, "dead_rank", "sigkill", at_step=5, rank=1, ready_file=str(folder / "r.{rank}.ready"))
    tag = uuid.uuid4().hex
    proc = subprocess.run(_command(launcher, [spec], folder / "res", folder, address, nproc=2),
                          env=_env(TB_FAULT_TAG=tag), capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr[-3000:]
    (path, result), = _records(folder / "res").values()
    assert result.status == "error" and result.world_size == 2, result.error
    assert "Connection closed by peer" in result.error or "Connection reset" in result.error or \
        "without writing a result" in result.error, result.error
    took = path.stat().st_mtime - (folder / "r.1.ready").stat().st_mtime
    assert took <= MARGIN_S, f"recorded {took:.1f} s after the rank died"
    _assert_nothing_left(tag, list(folder.glob("*.ready")))


def _driver_case(launcher: str, case: str, folder: Path, address: str | None) -> None:
    """The user stops the driver (SIGTERM, SIGINT) or it is killed (SIGKILL) while a run trains."""
    sig = DRIVER[case]
    ready = folder / "slow.0.ready"
    slow = write_spec(folder, "slow", "none", steps=100_000, sleep_s=0.05, at_step=6,
                      ready_file=str(folder / "slow.{rank}.ready"), **{"budget.max_train_s": 300, "target.value": 1.5})
    # a serial launcher must never start `after` (the user asked to stop); a pool of 2 or Ray starts both at
    # once, so `after` is slow too and both must be stopped and recorded
    after = write_spec(folder, "after", "none", steps=100_000, sleep_s=0.05, **{"budget.max_train_s": 300,
                                                                               "target.value": 1.5})
    tag = uuid.uuid4().hex
    results = folder / "res"
    proc = subprocess.Popen(_command(launcher, [slow, after], results, folder, address), env=_env(TB_FAULT_TAG=tag),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        wait_for(lambda: ready.exists() and ready.read_text(), 300, "the run to reach step 6")
        fired = time.time()
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=MARGIN_S + 60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    serial = launcher in ("inline", "study")  # one run at a time; a pool of 2 and Ray run both at once
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        wait_for(lambda: results.exists() and list(results.rglob("*.json")), MARGIN_S, "the orphaned run's record")
        want = "the launching process"
    else:
        assert proc.returncode == 1, stderr[-3000:]
        if launcher != "study":  # a summary is printed, one row per run that started
            rows = json.loads(stdout[stdout.index("["):])
            assert {r["status"] for r in rows} == {"interrupted"} and len(rows) == (1 if serial else 2), rows
        want = f"stopped by signal {sig.name}"
    if not serial:  # the second run was in flight too: wait for its record as well
        wait_for(lambda: len(list(results.rglob("*.json"))) == 2, MARGIN_S, "both in-flight runs' records")
    records = _records(results)
    assert set(records) == ({"slow"} if serial else {"slow", "after"}), records.keys()  # nothing started after
    for path, result in records.values():
        assert result.status == "interrupted" and want in (result.error or ""), result.error
        assert path.stat().st_mtime - fired <= MARGIN_S
    assert records["slow"][1].steps >= 6
    _assert_nothing_left(tag, [ready])


def teardown_module() -> None:
    for batch in _batches.values():
        shutil.rmtree(batch["folder"], ignore_errors=True)
    _batches.clear()
    os.environ.pop("TB_FAULT_TAG", None)

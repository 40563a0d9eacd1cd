"""Shared fixtures: the repo root, the digits spec, a subprocess env that imports this checkout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from support.stray_tests import claim  # tests/ is on sys.path: pytest put it there for this file

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
DIGITS = ROOT / "workloads" / "cv" / "digits_cnn.yaml"

claim()  # veRL's wheel installs a top-level `tests` package: `tests.<module>` stays this repository's (issue 49)
torch.set_num_threads(1)  # tests may run beside other processes: never oversubscribe (FACTS.md)
# Ray in tests stays on loopback: without this it advertises this machine's outbound address to its own
# processes (the only network tests may use is 127.0.0.0/8). Read by ray when it is first imported.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture(scope="module")
def ray_alone():
    """Held for a module that starts a Ray instance: two Ray instances on one machine (pytest-xdist runs test
    files side by side) would contend for Ray's fixed default ports, so such modules take turns."""
    import fcntl
    import tempfile

    with open(Path(tempfile.gettempdir()) / "trainbench-tests-ray.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A real one-node Slurm (munged, slurmctld, slurmd; 2 CPUs) for this session, torn down after it
    (tests/support/slurm_cluster.py). A machine that cannot host one skips with the reason."""
    from support.slurm_cluster import Cluster, unavailable

    why = unavailable()
    if why:
        pytest.skip(f"hardware: {why}")  # `make test` installs it (scripts/install_slurm.sh) where it can
    cluster = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def digits_path() -> Path:
    return DIGITS


# ---- a skip is a failure unless it is for hardware that cannot exist here (tests/support/promised.py) --------------


def _skip_reason(longrepr) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _forbidden_skip(report) -> str | None:
    from support.promised import HARDWARE

    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    reason = _skip_reason(report.longrepr)
    if reason.startswith(HARDWARE):
        return None
    return (f"skipped, but only missing hardware may skip (a reason starting {HARDWARE!r}): {reason}. A promised "
            "dependency must be installed (pip install -e '.[dev]'); use tests/support/promised.py: require()")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    message = _forbidden_skip(report)
    if message is not None:
        report.outcome, report.longrepr = "failed", message


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    message = _forbidden_skip(report)
    if message is not None:
        report.outcome, report.longrepr = "failed", message

"""Shared fixtures: the repo root, the digits spec, a subprocess env that imports this checkout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
DIGITS = ROOT / "workloads" / "cv" / "digits_cnn.yaml"

torch.set_num_threads(1)  # tests may run beside other processes: never oversubscribe (FACTS.md)
# Ray in tests stays on loopback: without this it advertises this machine's outbound address to its own
# processes (the only network tests may use is 127.0.0.0/8). Read by ray when it is first imported.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture
def digits_path() -> Path:
    return DIGITS


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for `python -m suite.cli` children: this checkout and tests/ first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "suite.cli", *args]

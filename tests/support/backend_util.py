"""Paths and subprocess helpers for the backend and parity tests (kept apart from conftest.py on purpose)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "workloads" / "cv" / "digits_cnn.yaml"
CHAR_GPT = TESTS / "support" / "specs" / "char_gpt.yaml"  # test-only char GPT on pydoc_data.topics (tests/support/char_lm.py)


def env(**extra: str) -> dict[str, str]:
    """A child's environment: this checkout and tests/ importable, one thread, no inherited torchrun variables."""
    out = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    out["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), os.environ.get("PYTHONPATH", "")])
    out["OMP_NUM_THREADS"] = "1"
    out.update(extra)
    return out


def trainbench(*args: str, timeout: float = 600, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True,
                          env=env(**extra_env), cwd=ROOT, timeout=timeout)


PARENT_START_S = 120.0  # the `trainbench` parent's own start (python, torch, the launcher) on a loaded machine


def run_hang_guard_s(spec_path: Path, sets: dict[str, Any] | None = None, seeds: int = 1,
                     division: str = "open", variant: str | None = None) -> float:
    """The latest `trainbench run` of this spec can legitimately end, per the limits it sets itself: for each seed,
    the isolated launcher's backstop (the child's start, the init window, the budget and one stall window:
    suite/execution/isolated.py) and its exit grace, plus the parent's own start. A hang guard (a child's
    `timeout=`, a test's pytest timeout) must lie above it, or it cuts a slow run that its own watchdog would
    still let finish, and the test fails for time instead of for its promise (docs/testing.md)."""
    from suite.execution.isolated import EXIT_GRACE_S, STARTUP_S
    from suite.execution.watchdog import Limits
    from suite.specload import load_spec

    limits = Limits.for_run(load_spec(spec_path, sets or {}, variant), division)
    return PARENT_START_S + seeds * (STARTUP_S + limits.worst_case_s() + EXIT_GRACE_S)


def set_flags(sets: dict[str, Any]) -> list[str]:
    """`--set key=value` for each override: the command-line form of the `sets` that `run_hang_guard_s` reads."""
    return [a for key, value in sets.items() for a in ("--set", f"{key}={value}")]


def json_rows(stdout: str) -> Any:
    return json.loads(stdout[stdout.index("[") :])

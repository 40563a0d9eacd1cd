"""Paths and subprocess helpers for the backend and parity tests (kept apart from conftest.py on purpose)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
DIGITS = ROOT / "workloads" / "cv" / "digits_cnn.yaml"
CHAR_GPT = TESTS / "specs" / "char_gpt.yaml"  # test-only char GPT on pydoc_data.topics (tests/char_lm.py)


def env(**extra: str) -> dict[str, str]:
    """A child's environment: this checkout and tests/ importable, one thread, no inherited torchrun variables."""
    out = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    out["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), os.environ.get("PYTHONPATH", "")])
    out["OMP_NUM_THREADS"] = "1"
    out.update(extra)
    return out


def trainbench(*args: str, timeout: int = 600, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True,
                          env=env(**extra_env), cwd=ROOT, timeout=timeout)


def json_rows(stdout: str) -> Any:
    return json.loads(stdout[stdout.index("[") :])

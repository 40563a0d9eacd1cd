"""`trainbench gh ...` / `runner ...` in a child, with a token and a repository in its environment and nothing of
the caller's GitHub credentials: the CLI tests of the GitHub client share this one runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a hang guard, not a time limit on the behaviour: a call to an unreachable API retries with real backoff
# (up to ~15 s of sleeps) after a Python start that takes tens of seconds on a loaded 2-core machine
HANG_GUARD_S = 300


def run_cli(args: list[str] | tuple[str, ...], *, token: str, repo: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    clean.update({"PYTHONPATH": str(ROOT), "GITHUB_TOKEN": token, "GITHUB_REPOSITORY": repo, **(env or {})})
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True, env=clean,
                          cwd=ROOT, timeout=HANG_GUARD_S)

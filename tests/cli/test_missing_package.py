"""A workload whose package is not installed is bad input (issue 49): `run rl/cartpole_ppo` without gymnasium exits 2
naming the package and the extra that installs it, and records nothing (it used to end as an `error` run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.backend_util import ROOT, env


def test_cartpole_without_gymnasium_exits_2_naming_the_extra(tmp_path: Path) -> None:
    hidden = tmp_path / "site" / "gymnasium"
    hidden.mkdir(parents=True)  # first on the path: `import gymnasium` fails here as it does where it is missing
    (hidden / "__init__.py").write_text('raise ImportError("No module named \'gymnasium\' (hidden by the test)")\n')
    results = tmp_path / "results"
    child_env = env()
    child_env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), child_env["PYTHONPATH"]])
    done = subprocess.run([sys.executable, "-m", "suite.cli", "run", "rl/cartpole_ppo", "--results", str(results)],
                          capture_output=True, text=True, env=child_env, cwd=ROOT, timeout=300)
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-2000:])
    assert "gymnasium" in done.stderr and "trainbench-suite[rl]" in done.stderr, done.stderr[-2000:]
    assert not list(results.rglob("*.json")), "a run that could not start was recorded"

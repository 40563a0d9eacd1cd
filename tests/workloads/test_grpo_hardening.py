"""GRPO's reward plug-ins, hardening round four (issue 50): processes a plug-in starts end with the run's process
(item 10), and rewards so large that the group statistics overflow are refused naming the plug-in (item 11)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.algorithms import grpo_rewards

ROOT = Path(__file__).resolve().parents[2]

SPAWNING = '''
import os
import subprocess
import sys

STARTED = []


def spawns(completion, answer):
    if not STARTED:  # one in this run's own session, one in a session of its own
        for new_session in (False, True):
            p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                 start_new_session=new_session)
            STARTED.append(p.pid)
        with open(os.environ["TB_SPAWNED"], "w") as f:
            f.write(" ".join(map(str, STARTED)))
    return 0.0


def huge(completion, answer):
    return 1e308 if len(completion) % 2 else -1e308
'''


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


@pytest.mark.slow  # one tiny GRPO run through the CLI: ~25 s at load 8
def test_processes_a_reward_plug_in_starts_end_with_the_run(tmp_path):
    (tmp_path / "spawning_rewards.py").write_text(SPAWNING)
    spawned = tmp_path / "spawned.txt"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{tmp_path}", "OMP_NUM_THREADS": "1", "TB_SPAWNED": str(spawned)}
    p = subprocess.run([sys.executable, "-m", "suite.cli", "run", "rl/arithmetic_grpo", "--variant", "tiny",
                        "--set", "grpo.reward=spawning_rewards:spawns", "--threads", "1", "--results",
                        str(tmp_path / "res")], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    pids = [int(x) for x in spawned.read_text().split()]
    try:
        assert p.returncode == 0, p.stderr[-2000:]
        time.sleep(0.5)
        assert [pid for pid in pids if _alive(pid)] == [], "the plug-in's processes outlived the run"
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_rewards_that_overflow_the_group_statistics_name_the_plug_in(tmp_path, monkeypatch):
    (tmp_path / "spawning_rewards.py").write_text(SPAWNING)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        name, fn = grpo_rewards.build("spawning_rewards:huge")
        with pytest.raises(grpo_rewards.RewardError, match=r"'spawning_rewards:huge' returned 1e\+308 for prompt "
                                                           r"index 3 .*within \+-1e\+18"):
            grpo_rewards.score(fn, name, ["1", "22", "3"], ["1", "2", "3"], [3, 3, 3])
        assert grpo_rewards.score(lambda c, a: 1e18, "x", ["1"], ["1"], [0]) == [1e18]
    finally:
        sys.modules.pop("spawning_rewards", None)


def test_a_run_whose_rewards_overflow_is_an_error_naming_the_plug_in(tmp_path, monkeypatch):
    from suite import harness
    from suite.specload import load_spec

    (tmp_path / "spawning_rewards.py").write_text(SPAWNING)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        spec = load_spec(ROOT / "workloads" / "rl" / "arithmetic_grpo.yaml",
                         {"grpo.reward": "spawning_rewards:huge"}, "tiny")
        result, _ = harness.run(harness.RunRequest(spec=spec, results_dir=None, threads=1, measure_peak=False))
    finally:
        sys.modules.pop("spawning_rewards", None)
    assert result.status == "error" and "reward plug-in 'spawning_rewards:huge' returned" in result.error, \
        (result.status, result.error)

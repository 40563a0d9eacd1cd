"""`trainbench mllog check` (issue 49, point 2): a run's MLLOG through MLPerf's official compliance checker, the
ruleset from the workload's spec; accepted exits 0, rejected 1 with the checker's own messages, bad input 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.backend_util import ROOT, env


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True,
                          env=env(COLUMNS="250"), cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("mllog")
    done = _cli("run", "cv/digits_cnn", "--variant", "tiny", "--results", str(results), "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = [p for p in results.rglob("*.json") if ".index" not in p.parts]
    return result


def test_a_run_s_log_passes_the_official_common_rules(digits_run: Path) -> None:
    done = _cli("mllog", "check", str(digits_run), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["passed"] and verdict["mlperf_benchmark"] is None and verdict["ruleset"] == "6.1.0"
    assert verdict["workload"] == "cv/digits_cnn" and "common rules" in verdict["rules"]


def test_a_broken_log_is_rejected_with_the_checker_s_messages(digits_run: Path, tmp_path: Path) -> None:
    log = digits_run.parent / json.loads(digits_run.read_text())["mllog"]
    lines = [line for line in log.read_text().splitlines() if '"key": "run_stop"' not in line]
    broken = tmp_path / "broken.mllog"
    broken.write_text("\n".join(lines) + "\n")
    done = _cli("mllog", "check", str(broken))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("REJECTED") and "run_stop" in done.stdout


def test_bad_input_is_named(digits_run: Path, tmp_path: Path) -> None:
    missing = _cli("mllog", "check", str(tmp_path / "nosuch.mllog"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    text = tmp_path / "notes.txt"
    text.write_text("just notes\n")
    plain = _cli("mllog", "check", str(text))
    assert plain.returncode == 2 and "no :::MLLOG line" in plain.stderr
    log = digits_run.parent / json.loads(digits_run.read_text())["mllog"]
    wrong = _cli("mllog", "check", str(log), "--workload", "nlp/llama31_8b")
    assert wrong.returncode == 2 and "llama31_8b" in wrong.stderr, wrong.stderr

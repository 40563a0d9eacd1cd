"""`trainbench compare` and `trainbench baseline promote` as CI calls them: a subprocess, files, exit codes."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from support.backend_util import DIGITS, run_hang_guard_s, set_flags

from benchmarks.sim.results import noisy_runs, write_all

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str | Path, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "suite.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


@pytest.fixture
def folders(tmp_path: Path) -> Path:
    rng = random.Random(1)
    write_all(tmp_path / "base", noisy_runs(rng, 5))
    write_all(tmp_path / "same", noisy_runs(rng, 5))
    write_all(tmp_path / "slow", noisy_runs(rng, 5, time_per_step_s=0.013, cv_steps=0.01))
    write_all(tmp_path / "other", noisy_runs(rng, 5, spec_hash="changed1"))
    return tmp_path


def test_exit_codes_are_distinct(folders: Path) -> None:
    promoted = cli("baseline", "promote", folders / "base", "--to", folders / "baselines")
    assert promoted.returncode == 0, promoted.stderr
    assert "wrote" in promoted.stdout and "5 seeds" in promoted.stdout
    bl = folders / "baselines"
    ok = cli("compare", "--baseline", bl, "--candidate", folders / "same")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("### TrainBench compare") and "no regression" in ok.stdout
    bad = cli("compare", "--baseline", bl, "--candidate", folders / "slow", "--format", "json")
    assert bad.returncode == 1, bad.stderr
    report = json.loads(bad.stdout)
    assert report["summary"]["exit_code"] == 1 and report["pairs"][0]["cause"] == "throughput"
    nothing = cli("compare", "--baseline", bl, "--candidate", folders / "other")
    assert nothing.returncode == 2 and "different spec hash" in nothing.stdout  # reported, then exit 2
    missing = cli("compare", "--baseline", bl, "--candidate", folders / "nope")
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr
    typo = cli("compare", "--baseline", bl, "--candidate", folders / "same", "--gate", "tta")
    assert typo.returncode == 2 and "gate metric" in typo.stderr


def test_overlapping_sides_are_refused_and_nothing_is_written(folders: Path) -> None:
    """A folder compared with itself, or with a folder inside it, counts the same runs on both sides (a x1.000
    [1.000, 1.000] `no change` for anything): bad input, exit 2, naming both flags, no report written."""
    for b, c in ((folders / "base", folders / "base"), (folders, folders / "slow"), (folders / "slow", folders),
                 (folders / "base", folders / "base" / ".." / "base")):
        r = cli("compare", "--baseline", b, "--candidate", c, "--out", folders / "r.md")
        assert r.returncode == 2, (b, c, r.stdout)
        assert "overlap" in r.stderr and "--baseline" in r.stderr and "--candidate" in r.stderr
        assert not (folders / "r.md").exists()
    assert cli("compare", "--baseline", folders / "base", "--candidate", folders / "same").returncode == 0


def test_out_files_and_strict(folders: Path) -> None:
    (folders / "same" / "corrupt.json").write_text("{")
    r = cli("compare", "-b", folders / "base", "-c", folders / "same", "--out", folders / "r.md",
            "--json-out", folders / "r.json")
    assert r.returncode == 0, r.stderr
    assert "corrupt.json" in r.stderr and "1 bad file(s) skipped" in (folders / "r.md").read_text()
    assert json.loads((folders / "r.json").read_text())["summary"]["bad_files"] == 1
    strict = cli("compare", "-b", folders / "base", "-c", folders / "same", "--strict")
    assert strict.returncode == 2 and "corrupt.json" in strict.stderr


def test_promote_refusals_exit_2(folders: Path) -> None:
    mixed = cli("baseline", "promote", folders / "base", folders / "other", "--to", folders / "bl")
    assert mixed.returncode == 2 and "mixed spec hashes" in mixed.stderr
    picked = cli("baseline", "promote", folders / "base", folders / "other", "--to", folders / "bl",
                 "--spec-hash", "changed1")
    assert picked.returncode == 0, picked.stderr
    again = cli("baseline", "promote", folders / "other", "--to", folders / "bl")
    assert again.returncode == 2 and "--replace" in again.stderr
    assert cli("baseline", "promote", folders / "other", "--to", folders / "bl", "--replace").returncode == 0


# a target the tiny variant reaches, the step budget that ends a run that does not, and a wall budget a loaded
# machine cannot exhaust first (under a full CPU hog the spec's 60 s ended 2 of 4 seeds before their target)
REAL_SETS = {"target.value": 0.6, "budget.max_steps": 400, "budget.max_train_s": 300}
REAL_GUARD_S = run_hang_guard_s(DIGITS, REAL_SETS, seeds=4, variant="tiny")


@pytest.mark.slow
@pytest.mark.timeout(2 * int(REAL_GUARD_S) + 120)
def test_real_runs_promote_and_compare(tmp_path: Path) -> None:
    """Real training (digits, tiny variant, a target it reaches) for 4 + 4 seeds, promoted and compared.
    Training is deterministic per seed, so steps to target match exactly whatever the machine's load."""
    common = ["run", "cv/digits_cnn", "--variant", "tiny", *set_flags(REAL_SETS), "--threads", "1", "--seeds", "4"]
    for side in ("base", "cand"):
        r = cli(*common, "--results", tmp_path / side, timeout=REAL_GUARD_S)
        assert r.returncode == 0, r.stderr[-2000:]
    assert cli("baseline", "promote", tmp_path / "base", "--to", tmp_path / "bl").returncode == 0
    r = cli("compare", "-b", tmp_path / "bl", "-c", tmp_path / "cand", "--format", "json")
    assert r.returncode in (0, 1), r.stderr  # time per step on a shared CPU may move; the run is comparable
    (pair,) = json.loads(r.stdout)["pairs"]
    assert pair["verdict"] != "not comparable"
    assert pair["baseline"]["reached"] == pair["candidate"]["reached"] == 4
    steps = next(m for m in pair["metrics"] if m["name"] == "steps_to_target")
    assert steps["ratio"] == 1.0 and steps["verdict"] == "no significant change"

"""`trainbench ab` and the PR workflow's A/B script, end to end against a local git repository.

The slow tests run scripts/ci/bench_ab.sh exactly as bench-pr.yml does (only the sizes are small): a head that
sleeps in the CNN's forward is `regressed`; a head whose code is identical to base is `no change`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ab_repo import make_repo

from suite import ab

ROOT = Path(__file__).resolve().parents[1]


def test_rounds_alternate_who_goes_first() -> None:
    assert ab.order_of(3, "alternate", 0) == [(0, "base"), (0, "head"), (1, "head"), (1, "base"),
                                              (2, "base"), (2, "head")]
    rnd = ab.order_of(40, "random", 1)
    firsts = [rnd[i][1] for i in range(0, 80, 2)]
    assert {"base", "head"} == set(firsts) and sorted(rnd[i][1] for i in range(80)).count("base") == 40
    with pytest.raises(ab.ABError, match="--order"):
        ab.order_of(2, "zigzag", 0)


def test_a_ref_that_does_not_resolve_is_bad_input(tmp_path: Path) -> None:
    repo, base, _ = make_repo(tmp_path, None)
    p = subprocess.run([sys.executable, "-m", "suite.cli", "ab", "--repo", str(repo), "--base", base, "--head",
                        "no-such-branch", "-w", "cv/digits_cnn", "--out", str(tmp_path / "ab"), "--deps", "shared"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 2 and "--head 'no-such-branch'" in p.stderr and not (tmp_path / "ab" / "base").exists()


def _workflow_ab(tmp_path: Path, slow_s: float | None) -> tuple[int, dict]:
    repo, base, head = make_repo(tmp_path, slow_s)
    work = tmp_path / "job"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINBENCH": f"{sys.executable} -m suite.cli",
           "REPO": str(repo), "BASE_SHA": base, "HEAD_SHA": head, "WORKLOADS": "cv/digits_cnn", "ROUNDS": "1",
           "RUNS_PER_BLOCK": "4", "THREADS": "1", "AB_DEPS": "shared", "AB_OUT": str(tmp_path / "ab"),
           "AB_SETS": "throughput.measure_steps=40 throughput.warmup_steps=5",
           # this shared 2-core machine's floor (an A/A interval here spans about +-10% at 4 x 40 steps); a
           # runner's own is measured by `trainbench calibrate` and read from baselines/ (FLOORS)
           "NOISE_FLOOR": "0.10"}
    p = subprocess.run(["bash", str(ROOT / "scripts/ci/bench_ab.sh")], cwd=work, env=env, capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    code = int((work / "compare-exit-code").read_text())
    manifest = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert manifest["sides"]["base"]["sha"] == base and manifest["sides"]["head"]["sha"] == head
    assert (work / "report.md").read_text().startswith("### TrainBench compare")
    return code, json.loads((work / "report.json").read_text())


@pytest.mark.slow
def test_the_pr_workflow_flags_a_slowed_head(tmp_path: Path) -> None:
    code, report = _workflow_ab(tmp_path, 0.08)  # +8 ms on a 15 ms step (quiet) to 100 ms (load 20)
    (pair,) = report["pairs"]
    assert (pair["verdict"], code) == ("regressed", 1), pair
    assert pair["candidate"]["runs"] == 4 and pair["metrics"][0]["ci_low"] > 1.10 and pair["noise_floor"] == 0.10


@pytest.mark.slow
def test_the_pr_workflow_passes_identical_code(tmp_path: Path) -> None:
    code, report = _workflow_ab(tmp_path, None)
    (pair,) = report["pairs"]
    assert (pair["verdict"], code) == ("no change", 0), pair

"""Hardening round four (issue 50, items 3-6) of `trainbench ab` and `trainbench bisect`: a commit that cannot be
measured is skipped as `git bisect skip` does; a side whose partner died measures on (the dead side's block holds
the failure); one A/B at a time in an --out; SIGTERM to the driver leaves no side process and no turn folder."""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from support.faults import ROOT, TESTS, write_spec

from benchmarks.sim.bisect import comparator, levels
from benchmarks.sim.git_repo import _git, make_repo
from suite.compare import ab, ab_plan
from suite.compare import bisect as bis
from suite.compare import model as compare_model
from suite.execution.processes import descendants
from suite.results.record import load_results

COMMITS = [f"{i:02x}" + "d" * 38 for i in range(16)]


# ---- item 3: a commit that cannot be measured is skipped --------------------------------------------------------


def _skipping(skip: set[int], culprit: int):
    inner = comparator(levels(COMMITS, {culprit: 1.10}), np.random.default_rng(3))

    def compare(base: str, head: str, rounds: int) -> bis.Decision:
        if COMMITS.index(head) in skip:
            return bis.Decision(bis.SKIPPED, note=f"{head[:12]} skipped: no run of it ended well (ImportError)")
        return inner(base, head, rounds)

    return compare


def test_a_commit_that_cannot_be_measured_is_skipped_and_the_search_goes_on() -> None:
    r = bis.bisect("cv/digits_cnn", "step_time", COMMITS, _skipping({7, 8}, 11), rounds=10)
    assert r.status == bis.FOUND and r.culprit == COMMITS[11], r.summary
    assert COMMITS[7] in r.skipped and "skipped (could not be measured)" in r.summary
    assert [t.verdict for t in r.tested].count(bis.SKIPPED) == len(r.skipped)
    assert r.to_json()["skipped"] == r.skipped and "| skipped |" in bis.to_markdown(r)


def test_only_skipped_commits_left_names_every_candidate() -> None:
    """Culprit 6, commit 5 unmeasurable: as `git bisect skip`, the first bad commit is 5 or 6, and it says so."""
    r = bis.bisect("cv/digits_cnn", "step_time", COMMITS, _skipping({5}, 6), rounds=10)
    assert r.status == bis.UNDECIDED and r.culprit is None and r.range == (COMMITS[4], COMMITS[6]), r.summary
    assert f"could be any of {COMMITS[5][:12]}, {COMMITS[6][:12]}" in r.summary


def _broken_repo(tmp_path: Path) -> tuple[Path, str, str]:
    """base, and a head whose suite does not import (a syntax error in its package's __init__)."""
    repo, base, _ = make_repo(tmp_path, None)
    init = repo / "suite" / "__init__.py"
    init.write_text(init.read_text() + "\ndef broken(:\n")
    _git(repo, "commit", "-q", "-am", "a commit that does not import")
    return repo, base, _git(repo, "rev-parse", "HEAD")


SHORT = ["throughput.measure_steps=20", "throughput.warmup_steps=1", "budget.watchdog_s=15"]


@pytest.mark.slow  # one comparison of two real processes: ~20 s at load 7
def test_the_real_comparator_skips_a_head_that_does_not_import(tmp_path: Path) -> None:
    from suite.compare.bisect_ab import ab_comparator

    repo, base, head = _broken_repo(tmp_path)
    plan = ab_plan.ABPlan(repo=repo, out=tmp_path / "bisect", workloads=["cv/digits_cnn"], deps="shared", threads=1,
                     sets=SHORT)
    d = ab_comparator(plan, "cv/digits_cnn", "step_time", compare_model.Settings(), [])(base, head, 1)
    assert d.verdict == bis.SKIPPED and "SyntaxError" in d.note, d
    (one,) = [p for p in (tmp_path / "bisect").iterdir() if p.name.startswith("01-")]
    base_runs = load_results(one / "base").results
    assert [r.status for _, r in base_runs] == ["measured"], [r.error for _, r in base_runs]  # item 4 as well


# ---- item 4: a dead partner ends the turn at once ------------------------------------------------------------------


def _side(tmp_path: Path, name: str, *extra: str) -> ab_plan.Side:
    """A side running this checkout, through a wrapper that adds `extra` to its `trainbench run` (a fault for one)."""
    wrapper = tmp_path / f"python-{name}"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={ROOT}:{TESTS} exec {sys.executable} "$@" {" ".join(extra)}\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return ab_plan.Side(name, name, name * 5, ROOT, wrapper)


@pytest.mark.slow  # two real processes in lockstep: ~35 s at load 10
def test_a_side_whose_partner_dies_measures_on_and_is_not_a_false_hang(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "lockstep")
    plan = ab_plan.ABPlan(repo=ROOT, out=tmp_path / "ab", workloads=[str(spec)], threads=1,
                     sets=["throughput.measure_steps=60", "throughput.warmup_steps=1", "budget.watchdog_s=8"])
    base = _side(tmp_path, "base")
    head = _side(tmp_path, "head", "--set", "model.fault=sigkill", "--set", "model.at_step=4")
    t = time.monotonic()
    blocks = ab.run_lockstep(base, head, plan, 0)
    by_side = {b.side: b for b in blocks}
    assert by_side["head"].exit_code != 0 and by_side["base"].exit_code == 0, blocks
    (result,) = [r for _, r in load_results(tmp_path / "ab" / "base").results]
    assert result.status == "measured" and result.steps == 60, result.error
    assert time.monotonic() - t < 120  # never the 120 s token wait


# ---- item 5: one A/B at a time in a folder -------------------------------------------------------------------------


def _ab(repo: Path, out: Path, base: str, head: str, *more: str, **popen) -> list[str]:
    return [sys.executable, "-m", "suite.cli", "ab", "--repo", str(repo), "--base", base, "--head", head, "-w",
            "cv/digits_cnn", "--out", str(out), "--deps", "shared", "--rounds", "1", "--threads", "1", *more]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **extra}


def test_an_out_folder_another_ab_is_working_in_is_refused(tmp_path: Path) -> None:
    repo, base, head = make_repo(tmp_path, None)
    out = tmp_path / "ab"
    out.mkdir()
    with open(out / ".ab.lock", "w") as held:  # what the other `trainbench ab` holds while it runs
        held.write("4242")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        p = subprocess.run(_ab(repo, out, base, head), capture_output=True, text=True, env=_env(), timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "another `trainbench ab` is working there now (pid 4242)" in " ".join(p.stderr.split())
    assert not (out / "base").exists() and not (out / "src").exists()


# ---- item 6: SIGTERM to the driver -----------------------------------------------------------------------------------


@pytest.mark.slow  # an A/B started and stopped: ~25 s at load 7
def test_sigterm_to_ab_ends_both_sides_and_removes_the_turn_folder(tmp_path: Path) -> None:
    repo, base, head = make_repo(tmp_path, None)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    driver = subprocess.Popen(_ab(repo, tmp_path / "ab", base, head, "--set", "throughput.measure_steps=100000"),
                              env=_env(TMPDIR=str(tmp)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 180
    while time.monotonic() < end and not (len(_runs(driver.pid)) == 2 and list(tmp.glob("ab-turns-*"))):
        time.sleep(0.2)
    time.sleep(3)  # both sides importing torch
    sides = descendants(driver.pid)
    try:
        assert len(sides) >= 2 and list(tmp.glob("ab-turns-*")), driver.stderr
        driver.send_signal(signal.SIGTERM)
        driver.wait(60)
        assert driver.returncode != 0
        time.sleep(0.5)
        alive = [pid for pid in sides if alive_now(pid)]
        assert alive == [], f"side processes left running: {alive}"
        assert not list(tmp.glob("ab-turns-*"))
    finally:  # whatever the outcome, nothing of this test keeps running
        for pid in [driver.pid, *sides]:
            if alive_now(pid):
                os.kill(pid, signal.SIGKILL)


def _runs(driver: int) -> list[int]:
    """The driver's `trainbench run` children (the two sides of a lockstep round)."""
    def cmdline(pid: int) -> bytes:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""

    return [pid for pid in descendants(driver) if b"suite.cli\0run\0" in cmdline(pid)]


def alive_now(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False

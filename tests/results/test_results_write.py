"""The one write path of a run's record on a full or read-only disk, and what killed writers leave behind.

A small tmpfs stands in for a full disk (root can mount one; CI runs as root on the same kind of machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from support.faults import cli, env, write_spec

from benchmarks.sim.results import make_result
from suite.execution import processes
from suite.results import record as results


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs; yields its path, unmounted afterwards."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(mnt: Path, leave_bytes: int) -> None:
    """Fill the disk until at most `leave_bytes` are free."""
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    with open(mnt / "filler", "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))


def test_a_full_disk_names_the_path_and_the_reason_and_leaves_nothing_half_written(small_disk):
    r = make_result(run_id="fulldisk")
    results.result_path(small_disk / "res", r).parent.mkdir(parents=True)
    _fill(small_disk, 0)
    with pytest.raises(results.ResultWriteError) as e:
        results.write_run(small_disk / "res", r, "x" * 20_000)
    assert str(e.value).startswith("cannot write result: ") and "No space left on device" in str(e.value)
    assert str(small_disk / "res") in str(e.value)
    # no result, no orphan side-car, no temporary
    assert not [p for p in (small_disk / "res").rglob("*") if p.is_file()]


def test_a_result_never_names_a_side_car_that_does_not_exist(small_disk):
    r = make_result(run_id="sidecar")
    _fill(small_disk, 24 * 1024)  # room for the result (~2 KB) but not for a 40 KB log
    path = results.write_run(small_disk / "res", r, "y" * 40_000)
    written = results.read_result(path)
    assert written.mllog is None and any("MLLOG" in w for w in written.warnings)
    assert not list(path.parent.glob("*.mllog"))
    # and with room, the side-car exists under the name the result gives
    os.unlink(small_disk / "filler")
    path = results.write_run(small_disk / "res2", make_result(run_id="sidecar2"), ":::MLLOG {}\n")
    assert (path.parent / results.read_result(path).mllog).read_text() == ":::MLLOG {}\n"


def test_a_read_only_folder_is_a_clear_error(small_disk):
    (small_disk / "res").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    with pytest.raises(results.ResultWriteError) as e:
        results.write_run(small_disk / "res", make_result(run_id="readonly"))
    assert "Read-only file system" in str(e.value)


@pytest.mark.slow
def test_run_on_a_disk_that_fills_prints_the_measurements_and_exits_1(small_disk, tmp_path):
    spec = write_spec(tmp_path, "fills", "none", steps=6)
    res = small_disk / "res"
    res.mkdir()
    _fill(small_disk, 4096)  # the writability probe passes (an empty file), the result (~9 KB) does not fit
    p = subprocess.run(cli("run", str(spec), "--results", str(res), "--threads", "1", "--quiet"), env=env(),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stderr[-3000:]
    assert "cannot write result: " in p.stderr and "No space left on device" in p.stderr
    assert "Traceback" not in p.stderr
    measured = json.loads(p.stdout.splitlines()[0])  # the whole record, so nothing is lost
    assert measured["steps"] == 6 and measured["status"] in ("budget", "reached")
    assert not [q for q in res.rglob("*") if q.is_file()]


def test_stale_temporaries_are_cleaned_at_the_next_write_only_when_old(tmp_path):
    r = make_result(run_id="first")
    folder = results.result_path(tmp_path, r).parent
    folder.mkdir(parents=True)
    old, fresh = folder / ".tmp-old.part", folder / ".tmp-fresh.part"
    old.write_text("half")
    fresh.write_text("a live writer's")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    results.write_run(tmp_path, r)
    assert not old.exists() and fresh.exists()


def test_stale_job_folders_are_swept_only_when_their_processes_are_gone(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale, live = tmp_path / f"{processes.JOB_PREFIX}stale", tmp_path / f"{processes.JOB_PREFIX}live"
    for folder, pid in ((stale, dead.pid), (live, os.getpid())):
        folder.mkdir()
        (folder / "job.pkl").write_bytes(b"x")
        (folder / "owner.json").write_text(json.dumps({
            "parent": pid, "parent_start": processes.process_start_time(pid), "child": None}))
    assert processes.sweep_stale_jobs(str(tmp_path)) == 1
    assert not stale.exists() and live.exists()


def test_a_killed_drivers_peak_cache_is_removed_by_the_next_driver(tmp_path, monkeypatch):
    """A SIGKILLed `trainbench run` cannot remove its peak cache file; the next one removes every file whose
    driver is gone, and none of a live driver or a young file named without its owner."""
    from suite.execution import launch

    monkeypatch.setattr(launch.tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()
    here = f"{os.getpid()}-{processes.process_start_time(os.getpid())}"
    killed = tmp_path / f"{processes.PEAKS_PREFIX}{dead.pid}-{processes.process_start_time(os.getpid())}-ab.json"
    reused = tmp_path / f"{processes.PEAKS_PREFIX}{os.getpid()}-1-cd.json"  # this pid, another process's start
    live = tmp_path / f"{processes.PEAKS_PREFIX}{here}-ef.json"
    old, young = tmp_path / f"{processes.PEAKS_PREFIX}old.json", tmp_path / f"{processes.PEAKS_PREFIX}young.json"
    for f in (killed, reused, live, old, young):
        f.write_text("{}")
    os.utime(old, (time.time() - 2 * 86400, time.time() - 2 * 86400))
    made = Path(launch.peak_cache_file())
    assert made.parent == tmp_path and made.name.startswith(f"{processes.PEAKS_PREFIX}{here}-")
    assert json.loads(made.read_text()) == {}
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted(f.name for f in (live, young, made))


@pytest.mark.parametrize("depth", ["first", "last"])
def test_a_file_where_a_folder_must_be_is_a_clear_error_not_an_endless_retry(tmp_path, depth):
    """mkdir's FileExistsError (the result's own folder exists as a file) once read as a run-id collision:
    write_run then retried with fresh ids forever."""
    result = make_result(run_id="blocked")
    folder = results.result_path(tmp_path, result).parent
    blocker = tmp_path / folder.relative_to(tmp_path).parts[0] if depth == "first" else folder
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a folder")
    with pytest.raises(results.ResultWriteError) as e:
        results.write_run(tmp_path, result, ":::MLLOG {}\n")
    assert "Not a directory" in str(e.value) and str(folder) in str(e.value)
    assert result.run_id == "blocked"  # never taken for a collision
    with pytest.raises(NotADirectoryError):
        results.write_result(tmp_path, make_result(run_id="blocked2"))

"""Processes on Linux, through /proc: is this very process alive, its descendants, kill a tree, stale job folders and peak caches."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

JOB_PREFIX = "trainbench-run-"
PEAKS_PREFIX = "trainbench-peaks-"  # + the driver's pid and start time: a sweep can tell whose it is
UNOWNED_STALE_S = 86400  # a leftover that does not say whose it is: only this old is it certainly stale


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of pid (field 22 of /proc/pid/stat): with the pid, it names one process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def alive(pid: int, start: str | None) -> bool:
    """Is this very process (not a later one that reused its pid) still running, and not a zombie?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in ("Z", "X") and (start is None or fields[19] == start)


def descendants(pid: int) -> list[int]:
    """Every process below pid (Linux /proc). torchrun starts each worker in a session of its own, so
    killing torchrun's process group would leave the workers running."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def adopt_orphans() -> bool:
    """Make this process the child subreaper of its tree (Linux prctl PR_SET_CHILD_SUBREAPER): a process that its
    parent left behind, even one in a session of its own (setsid, start_new_session), stays below this one, so
    `end_descendants` finds it. False where the kernel has no such call."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def end_descendants() -> list[int]:
    """SIGKILL every process below this one (a run's process ends with its whole tree: a process a reward plug-in
    or a user's model started must not outlive the run, issue 50 item 10), then reap what was adopted. Returns the
    pids ended."""
    pids = descendants(os.getpid())
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    for _ in pids:  # adopted orphans are our children now: reap them (Popen objects of the run are done with)
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break
    return pids


def kill_tree(pid: int) -> None:
    for p in [pid, *descendants(pid)]:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def sweep_stale_jobs(tmp_root: str | None = None) -> int:
    """Remove private job folders whose launcher and child are both gone (a SIGKILL left them): returns how many."""
    removed = 0
    root = Path(tmp_root or tempfile.gettempdir())
    for folder in root.glob(f"{JOB_PREFIX}*"):
        try:
            owner = json.loads((folder / "owner.json").read_text())
            live = alive(owner["parent"], owner["parent_start"]) or (
                owner.get("child") is not None and alive(owner["child"], owner.get("child_start")))
        except (OSError, ValueError, KeyError, TypeError):
            try:  # no owner file: only a folder older than a day is certainly stale
                live = time.time() - folder.stat().st_mtime < UNOWNED_STALE_S
            except OSError:
                continue
        if not live:
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


def sweep_stale_peak_caches(tmp_root: str | None = None) -> int:
    """Remove peak cache files (suite/execution/launch.py: peak_cache_file) whose driver is gone (a SIGKILL
    left them): returns how many. A file named without its owner is removed only when older than a day."""
    removed = 0
    for path in Path(tmp_root or tempfile.gettempdir()).glob(f"{PEAKS_PREFIX}*.json"):
        owner = path.name[len(PEAKS_PREFIX):].split("-")
        try:
            live = alive(int(owner[0]), owner[1]) if len(owner) >= 3 and owner[1].isdigit() else (
                time.time() - path.stat().st_mtime < UNOWNED_STALE_S)
            if not live:
                path.unlink()
                removed += 1
        except (OSError, ValueError):
            continue
    return removed


def torchrun_command(nproc: int, module: str, args: list[str], torchrun_args: list[str] | None = None) -> list[str]:
    """`python -m torch.distributed.run ... --nproc_per_node N -m MODULE ARGS`: the one way ranks are started."""
    return [sys.executable, "-m", "torch.distributed.run", *(torchrun_args or ["--standalone"]),
            f"--nproc_per_node={nproc}", "-m", module, *args]


def torchrun_env(env: dict[str, str]) -> dict[str, str]:
    """The environment to start torchrun with. torchrun sets OMP_NUM_THREADS=1 for its ranks where it is unset, and
    says so in a five-line banner that even `--quiet` printed; setting the same value here keeps the behaviour and
    drops the banner (the harness sets torch's own thread count per rank anyway: suite/devices.py)."""
    return {**env, "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS") or "1"}


def nnodes_of(torchrun_args: list[str] | None) -> int:
    """The node count torchrun arguments launch (1 for --standalone; suite/backends/layout.py builds them)."""
    for a in torchrun_args or []:
        if a.startswith("--nnodes="):
            return int(a.split("=", 1)[1])
    return 1

"""A trainer that is a program of its own (veRL's `python -m verl.trainer.main_ppo`), started by a run as its child:
in a session (and process group) of its own, output to a log file, and never outliving the run.

How it dies with the run, whichever way the run ends:
- the run stops it (target reached, budget, a stop signal, the launcher's death seen by the run's parent watch):
  `stop` sends SIGTERM to its process group, waits a grace period, then SIGKILLs every process of its tree as it
  was before the signal (a tree read first: processes whose parent died are re-parented and no longer below it);
- the run's process dies without stopping it (the watchdog's hard exit, SIGKILL, the OOM killer): the trainer's
  first process gets SIGKILL from the kernel (PR_SET_PDEATHSIG, set between fork and exec); Ray's own processes
  share the fate of the driver that started them;
- the launcher kills the run's process tree (suite/execution/isolated.py: `kill_tree`): it is part of that tree.
"""

from __future__ import annotations

import collections
import ctypes
import os
import signal
import subprocess
from pathlib import Path

# layer: the process-tree helpers (suite/execution/processes.py imports no suite module), shared with the launchers
from suite.execution.processes import alive, descendants, process_start_time

STOP_GRACE_S = 10.0
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec: no Python state beyond this call
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class TrainerProcess:
    def __init__(self, command: list[str], env: dict[str, str], cwd: Path, log: Path):
        self.command, self.env, self.cwd, self.log = command, env, cwd, log
        self.popen: subprocess.Popen[bytes] | None = None
        self.stopped_by_us = False

    def start(self) -> TrainerProcess:
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.command, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                          preexec_fn=_die_with_parent)
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None, "start() first"
        return self.popen.pid

    def poll(self) -> int | None:
        assert self.popen is not None, "start() first"
        return self.popen.poll()

    def stop(self, grace_s: float = STOP_GRACE_S) -> int:
        """End it and every process it started; returns its exit code (negative: the signal)."""
        assert self.popen is not None, "start() first"
        if self.popen.poll() is not None:
            self._kill_left([])
            return self.popen.returncode
        self.stopped_by_us = True
        tree = [(p, process_start_time(p)) for p in [self.pid, *descendants(self.pid)]]
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except OSError:
            pass
        try:
            self.popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        self._kill_left(tree)
        return self.popen.wait()

    def _kill_left(self, tree: list[tuple[int, str | None]]) -> None:
        """SIGKILL to what is still alive of a tree read earlier, and to the process group (start_new_session: the
        group's id is the trainer's pid, and a group whose leader is gone keeps its id while members live)."""
        for pid, start in tree:
            if alive(pid, start):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        if self.popen is not None and self.popen.poll() is None:
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def tail(self, lines: int = 40, chars: int = 4000) -> str:
        """The last lines of its output (the log file)."""
        try:
            with open(self.log, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log) - 64 * 1024))
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(collections.deque(text.splitlines(), maxlen=lines))[-chars:]


class LineReader:
    """The complete lines appended to a file since the last read (a writer's partial line waits for its end)."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, b""

    def exists(self) -> bool:
        return self.path.exists()

    def new_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        data = self.partial + chunk
        *lines, self.partial = data.split(b"\n")
        return [line.decode("utf-8", errors="replace") for line in lines if line.strip()]


"""A trainer of its own started by a run (suite/backends/trainer_process.py) never outlives the run: `stop` ends
its whole tree, and when the run's process dies without stopping it, the kernel ends it (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from suite.backends.trainer_process import LineReader, TrainerProcess
from suite.execution.processes import alive, descendants, process_start_time

ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int, start: str | None, within_s: float = 10.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not alive(pid, start):
            return True
        time.sleep(0.05)
    return False


def test_stop_ends_the_trainer_and_what_it_started(tmp_path):
    # a trainer that ignores SIGTERM and has a child in a session of its own (as Ray's processes are)
    script = ("import signal, subprocess, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "subprocess.Popen(['sleep', '60'], start_new_session=True); print('up', flush=True); time.sleep(60)")
    proc = TrainerProcess([sys.executable, "-c", script], dict(os.environ), tmp_path, tmp_path / "log").start()
    end = time.monotonic() + 10
    while "up" not in proc.tail() and time.monotonic() < end:
        time.sleep(0.05)
    kids = [(p, process_start_time(p)) for p in descendants(proc.pid)]
    assert kids and "up" in proc.tail()
    started = time.monotonic()
    rc = proc.stop(grace_s=0.5)
    assert rc < 0 and time.monotonic() - started < 5 and proc.stopped_by_us
    assert all(_gone(p, s) for p, s in kids)


def test_the_trainer_dies_with_the_run_that_started_it(tmp_path):
    """The run's process ends without a word (os._exit, as the watchdog's hard exit): its trainer goes with it."""
    code = (f"import os, sys; sys.path.insert(0, {str(ROOT)!r}); from pathlib import Path; "
            "from suite.backends.trainer_process import TrainerProcess; "
            f"p = TrainerProcess(['sleep', '60'], dict(os.environ), Path({str(tmp_path)!r}), Path({str(tmp_path / 'log')!r})).start(); "
            "print(p.pid, flush=True); os._exit(0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    pid = int(out.stdout.split()[0])
    assert _gone(pid, None), "the trainer outlived the run's process"


def test_the_reader_hands_out_whole_lines_only(tmp_path):
    path = tmp_path / "metrics.jsonl"
    reader = LineReader(path)
    assert not reader.exists() and reader.new_lines() == []
    path.write_bytes(b'{"step": 1}\n{"ste')
    assert reader.new_lines() == ['{"step": 1}']
    with open(path, "ab") as f:
        f.write(b'p": 2}\n')
    assert reader.new_lines() == ['{"step": 2}'] and reader.new_lines() == []

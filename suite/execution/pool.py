"""`--executor local --jobs N`: runs in up to N parallel processes on this machine, torch threads = cores / N.

One fresh (spawned) process per run: a run's memory and thread pools never leak into the next, and a run
whose process dies (segfault, OOM kill, os._exit) is recorded as `error` without disturbing the others.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from typing import Any

from suite.execution.launch import error_result, from_worker, run_worker
from suite.harness import RunRequest
from suite.results import Result


def threads_per_job(jobs: int, cores: int | None = None) -> int:
    from suite.devices import cpu_cores

    return max(1, (cores or cpu_cores()) // max(1, jobs))


def _child(req: RunRequest, conn: Connection) -> None:
    try:
        conn.send(("ok", run_worker(req)))
    except BaseException as e:  # noqa: BLE001 - report anything, even SystemExit, to the driver
        conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()[-3000:]}"))
    finally:
        conn.close()


@dataclass
class _Slot:
    req: RunRequest
    proc: Any
    conn: Connection
    reply: tuple[str, str] | None = None


def execute(requests: list[RunRequest], jobs: int) -> Iterator[Result]:
    if jobs < 1:
        raise ValueError(f"--jobs {jobs}: must be at least 1")
    todo = [r if r.threads else replace(r, threads=threads_per_job(jobs)) for r in requests]
    todo.reverse()
    # spawn, not fork: a forked torch process inherits the parent's thread pools and locks
    ctx = mp.get_context("spawn")
    running: list[_Slot] = []
    try:
        while todo or running:
            while todo and len(running) < jobs:
                req = todo.pop()
                parent, child = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(req, child), daemon=True)
                proc.start()
                child.close()
                running.append(_Slot(req, proc, parent))
            ready = set(wait([s.conn for s in running] + [s.proc.sentinel for s in running]))
            for slot in list(running):
                if slot.conn in ready and slot.reply is None:
                    try:
                        slot.reply = slot.conn.recv()
                    except (EOFError, OSError):
                        slot.reply = None  # the process died before replying; its exit code says how
                if slot.proc.sentinel in ready or slot.reply is not None:
                    slot.proc.join()
                    running.remove(slot)
                    result = _outcome(slot)
                    slot.conn.close()
                    yield result
    finally:
        for slot in running:  # the driver was interrupted: stop the children, they would write nothing
            slot.proc.terminate()
            slot.proc.join(5)


def _outcome(slot: _Slot) -> Result:
    if slot.reply is None:
        try:
            if slot.conn.poll():
                slot.reply = slot.conn.recv()
        except (EOFError, OSError):
            pass
    if slot.reply is None:
        return error_result(slot.req, f"worker process died with exit code {slot.proc.exitcode} before "
                                      "reporting a result (killed, out of memory, or a crash in native code)")
    kind, payload = slot.reply
    if kind == "ok":
        return from_worker(payload)
    return error_result(slot.req, f"worker failed: {payload}")

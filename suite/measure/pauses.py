"""Pauses of the whole process inside the timed run: SIGSTOP then SIGCONT, a suspended VM, a preempted container.

MLPerf's clock is never paused, so a run that was stopped for 30 s and then went on to its target has the 30 s
inside its time to target. The result must say so. A daemon thread asks to wake every POLL_S; when it wakes
MIN_GAP_S or more later than that, and the process used almost no CPU time meanwhile (MAX_CPU_SHARE of the gap,
over all its threads), the process did not run: the gap is a pause. A step that is merely slow (a long op holding
the GIL, a cold cache) burns CPU time and is not one; a host so loaded that this process got no CPU for seconds
is reported as a pause too, and its timings are as untrustworthy. Nothing runs per training step: the loop's
cost is unchanged (the harness starts the thread at run_start and stops it with the clock).

Each rank watches only itself; the result (rank 0's) names rank 0's pauses. A paused peer shows up on rank 0
as slow collectives, not as a pause.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from suite.results.conditions import PAUSE_PREFIX

POLL_S = 0.25
MIN_GAP_S = 2.0  # far beyond a scheduling delay: a thread waiting 0.25 s wakes within ~0.1 s even at load 16
MAX_CPU_SHARE = 0.2  # CPU seconds per wall second of the gap below which the process cannot have been running


@dataclass(frozen=True)
class Pause:
    start: float  # perf_counter when the process stopped running (within POLL_S)
    end: float  # perf_counter when it ran again
    cpu_s: float  # CPU seconds the process used across the whole gap
    step: int  # training steps done when it stopped


class PauseWatch:
    """Watches for pauses from a daemon thread between `start()` and `stop()`; `pauses` holds what it saw."""

    def __init__(self, steps_done=lambda: 0, poll_s: float = POLL_S, min_gap_s: float = MIN_GAP_S):
        self.steps_done = steps_done
        self.poll_s, self.min_gap_s = poll_s, min_gap_s
        self.pauses: list[Pause] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="trainbench-pause-watch", daemon=True)

    def start(self) -> PauseWatch:
        self._thread.start()
        return self

    def stop(self) -> list[Pause]:
        """Stop watching, with a last look (a pause may end just before the clock stops)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.poll_s + 5.0)
        return self.pauses

    def _loop(self) -> None:
        last, last_cpu, step = time.perf_counter(), time.process_time(), self.steps_done()
        while True:
            stopping = self._stop.wait(self.poll_s)
            now, cpu = time.perf_counter(), time.process_time()
            gap = now - last - self.poll_s if not stopping else now - last
            if gap >= self.min_gap_s and cpu - last_cpu < MAX_CPU_SHARE * gap:
                self.pauses.append(Pause(start=now - gap, end=now, cpu_s=cpu - last_cpu, step=step))
            if stopping:
                return
            last, last_cpu, step = now, cpu, self.steps_done()


def warnings_for(pauses: list[Pause], t0: float, t_end: float, median_step_s: float | None) -> list[str]:
    """One warning per pause inside [t0, t_end] (the timed run), in the words a result, compare and the site show."""
    out = []
    for p in pauses:
        start, end = max(p.start, t0), min(p.end, t_end)
        if end - start <= 0:
            continue
        times = f", {(end - start) / median_step_s:,.0f} times the median step ({median_step_s * 1e3:.3g} ms)" \
            if median_step_s else ""
        out.append(f"{PAUSE_PREFIX} the process did not run for {end - start:.1f} s from {start - t0:.1f} s into the "
                   f"timed run (after step {p.step}{times}; {p.cpu_s:.2f} CPU s in that time): it was stopped "
                   "(SIGSTOP, a suspended VM, a preempted container) or starved of CPU. The clock never pauses, so "
                   "its time to target includes this; rerun it before comparing")
    return out

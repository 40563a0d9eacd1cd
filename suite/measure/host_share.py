"""What a busy host took from a run: the time its main thread waited for a CPU, the load while it ran, and the
budget clock that does not count that wait.

A CPU run's budget (`budget.clock: own`, what `auto` means on a CPU device) counts the time the run itself had:
wall time minus the time its main thread sat runnable in the kernel's run queue while other processes held the
cores (Linux schedstat, /proc/thread-self/schedstat, second field, ns). On a quiet host the two agree within
milliseconds; at load 16 on 2 cores a 60 s budget lasts until the run has had its 60 s. A starved run still ends:
at WALL_CAP x the budget of wall time. Time to target stays wall time on MLPerf's clock (never corrected); the
result records the wait and the host's load (at the start, the highest while the clock ran, at the end), and a run
on a loaded host is marked so (suite.results.conditions) and kept off the leaderboards. Where schedstat cannot be
read (not Linux), the budget is wall time and the result says so. Nothing is read per step until the wall budget
is spent, except a load sample once a second (os.getloadavg, a read of /proc/loadavg).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

SCHEDSTAT = Path("/proc/thread-self/schedstat")
WALL_CAP = 20.0  # a run the host starves for good still ends, at 20x its budget of wall time (load ~40 on 2 cores)
SAMPLE_S = 1.0  # load samples while the clock runs


def run_queue_wait_s(path: Path = SCHEDSTAT) -> float | None:
    """Seconds the calling thread has spent runnable but waiting for a CPU since it started, or None (no schedstat)."""
    try:
        return int(path.read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def clock_of(setting: str, device_type: str) -> str:
    """The budget clock a run uses: `own` or `wall` (`auto`: own on a CPU device, wall on an accelerator, whose
    steps a loaded host's CPUs slow far less, and whose budgets are the ones MLPerf-style runs declare)."""
    if setting == "auto":
        return "own" if device_type == "cpu" else "wall"
    return setting


class HostShare:
    """One rank's account of its host between `start` (the clock's t0) and `stop`; `spent` is the budget test."""

    def __init__(self, budget_s: float, clock: str, device_type: str, wall_cap: float = WALL_CAP,
                 schedstat: Path = SCHEDSTAT):
        self.budget_s = budget_s
        self.clock = clock_of(clock, device_type)
        self.schedstat = schedstat
        self.wall_cap_s = budget_s * wall_cap
        self.no_schedstat = False
        self.load_avg_max: list[float] | None = None
        self.cpu_wait_s: float | None = None
        self._wait0: float | None = None
        self._next_sample = 0.0

    def start(self, t0: float) -> HostShare:
        self._wait0 = run_queue_wait_s(self.schedstat)
        if self.clock == "own" and self._wait0 is None:
            self.clock, self.no_schedstat = "wall", True
        self._next_sample = t0
        self.sample(t0)
        return self

    def waited_s(self) -> float:
        """Seconds this thread has waited for a CPU since `start`."""
        now = run_queue_wait_s(self.schedstat)
        return max(0.0, now - self._wait0) if now is not None and self._wait0 is not None else 0.0

    def sample(self, now: float) -> None:
        """Keep the highest 1-minute load seen (with its 5 and 15); at most once every SAMPLE_S."""
        if now < self._next_sample:
            return
        self._next_sample = now + SAMPLE_S
        try:
            load = [round(float(v), 2) for v in os.getloadavg()]
        except OSError:
            return
        if self.load_avg_max is None or load[0] > self.load_avg_max[0]:
            self.load_avg_max = load

    def spent(self, wall_s: float, now: float) -> bool:
        """True once the run has used its budget: `wall_s` past it (clock `wall`), or `wall_s` less the time it waited
        for a CPU past it (clock `own`), or `wall_s` past the cap."""
        self.sample(now)
        if wall_s < self.budget_s:
            return False
        if self.clock == "wall" or wall_s >= self.wall_cap_s:
            return True
        return wall_s - self.waited_s() >= self.budget_s

    def run_limit_s(self) -> float:
        """The longest the timed run may last (the watchdog's whole-run limit adds its stall window to this)."""
        return self.wall_cap_s if self.clock == "own" else self.budget_s

    def stop(self, wall_s: float, cores: int) -> list[str]:
        """Ends the account (call it as the clock stops: the wait is read now); the warnings the result carries."""
        self.cpu_wait_s = round(self.waited_s(), 3) if self._wait0 is not None else None
        self.sample(time.perf_counter() + SAMPLE_S)
        out: list[str] = []
        if self.no_schedstat:
            out.append("budget: counted in wall time (no /proc/thread-self/schedstat here to take out the time the "
                       "run waited for a CPU)")
        waited = self.cpu_wait_s or 0.0
        if wall_s > 0 and waited >= max(1.0, 0.05 * wall_s):
            load = f"load up to {self.load_avg_max[0]:g}" if self.load_avg_max else "load unknown"
            out.append(f"busy host: the run waited {waited:.1f} s of its {wall_s:.1f} s for a CPU ({load} on {cores} "
                       f"cores); {'its budget did not count that wait' if self.clock == 'own' else 'its budget did'}"
                       "; time to target is wall time, measured on a loaded host")
        return out


def host_fields(host: HostShare | None) -> dict[str, object]:
    """The result's hardware fields from a run's account (none before its clock started)."""
    return {"load_max": host.load_avg_max, "cpu_wait_s": host.cpu_wait_s} if host is not None else {}

"""The wall-clock account of one run (`Result.goodput`): where every second from process start to the record went.

The harness laps a stopwatch at fixed points (docs/metrics.md, "Where the wall clock goes"): each interval is
measured where it happens (the wait for a batch around `next()`, an evaluation around its call, a checkpoint
around its save) and lands in exactly one part. `wall_s` is measured apart, on another clock (CLOCK_BOOTTIME from
the kernel's record of the process start), so a second counted twice or missed shows as `unaccounted_s`.
Compilation is measured from the step times, as Google's goodput library does: the excess of the first steps
over the settled step time. goodput = productive step time / wall time.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

# the parts, in the order of a run (and of the bar on the run page)
PARTS = ("startup_s", "init_s", "checkpoint_restore_s", "compile_s", "steps_s", "data_wait_s", "eval_s",
         "checkpoint_save_s", "lost_s", "recovery_s", "other_s", "teardown_s")
PRODUCTIVE = "steps_s"
SETTLE_RATIO = 1.5  # a step no slower than this x the settled step time has settled (compilation is over)


def boottime() -> float:
    """Seconds since boot on the kernel's CLOCK_BOOTTIME, the clock /proc's process start times are on."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def process_start_boottime(pid: int | None = None) -> float | None:
    """When this process started (fork or exec), seconds since boot (10 ms resolution at HZ 100); None off Linux."""
    try:
        with open(f"/proc/{pid or os.getpid()}/stat", "rb") as f:
            stat = f.read().decode()
        fields = stat[stat.rindex(")") + 2:].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat(5): starttime, in clock ticks
    except (OSError, ValueError, IndexError):
        return None


def settled(step_compute_s: Sequence[float]) -> tuple[int, float | None]:
    """(k, settled step seconds): the first k steps ran before step time settled; the settled time is the median
    of the later half of the steps. k is at most half the steps, so a short run is never all compilation."""
    n = len(step_compute_s)
    if n == 0:
        return 0, None
    m = statistics.median(step_compute_s[n // 2:])
    k = 0
    while k < n // 2 and step_compute_s[k] > SETTLE_RATIO * m:
        k += 1
    return k, m


@dataclass
class Account:
    """The stopwatch of one run on one rank. `entry` is perf_counter when the harness took the run."""

    launched: bool  # the process was started for this run (a child of the launcher): startup is measured
    entry: float = field(default_factory=time.perf_counter)
    entry_boot: float = field(default_factory=boottime)
    parts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))
    step_compute_s: list[float] = field(default_factory=list)  # per step: compute, loader wait and evals left out
    carried: dict[str, float] = field(default_factory=dict)  # earlier attempts of the job (a restart): their parts
    carried_wall_s: float = 0.0
    closed: Goodput | None = None
    cursor: float = 0.0  # perf_counter up to which the wall clock is accounted for

    def __post_init__(self) -> None:
        self.cursor = self.entry

    def add(self, part: str, seconds: float) -> None:
        self.parts[part] += seconds

    side_s: float = 0.0  # evaluation and checkpoint seconds inside the current step's iteration (`timed`)

    @contextmanager
    def timed(self, part: str) -> Iterator[None]:
        """A block inside a step's iteration that has a part of its own (an evaluation, a checkpoint save)."""
        t = time.perf_counter()
        try:
            yield
        finally:
            took = time.perf_counter() - t
            self.parts[part] += took
            self.side_s += took

    def lap_around(self, part: str) -> None:
        """The time since the last lap, less the `timed` blocks inside it, goes to `part`."""
        now = time.perf_counter()
        self.parts[part] += now - self.cursor - self.side_s
        self.cursor, self.side_s = now, 0.0

    def end_step(self, ts: float, td: float) -> None:
        """A step's iteration ends: its wait for the batch (ts to td) is data wait, the rest less the `timed`
        blocks is the step's compute (its loss read, stop agreement and progress line included)."""
        te = time.perf_counter()
        self.parts["data_wait_s"] += td - ts
        self.step_compute_s.append(te - self.cursor - (td - ts) - self.side_s)
        self.cursor, self.side_s = te, 0.0

    def lap(self, part: str, now: float | None = None) -> float:
        """The time since the last lap goes to `part`; returns now."""
        now = time.perf_counter() if now is None else now
        self.parts[part] += now - self.cursor
        self.cursor = now
        return now

    def start_boot(self) -> float:
        """When this attempt's wall clock starts, on CLOCK_BOOTTIME: the process start, or the harness entry."""
        start = process_start_boottime() if self.launched else None
        return start if start is not None else self.entry_boot

    def epoch_of(self, boot_s: float) -> float:
        """A CLOCK_BOOTTIME reading as Unix time (to compare with what another process wrote)."""
        return time.time() - (boottime() - boot_s)

    def compute(self, end: float | None = None) -> Goodput:
        """The account up to `end` (perf_counter; default now), earlier attempts of the job included."""
        end_perf = time.perf_counter() if end is None else end
        end_boot = boottime() - (time.perf_counter() - end_perf)
        start_boot = process_start_boottime() if self.launched else None
        startup = max(0.0, self.entry_boot - start_boot) if start_boot is not None else 0.0
        wall = (end_boot - start_boot) if start_boot is not None else (end_boot - self.entry_boot)
        parts = dict(self.parts)
        parts["startup_s"] = startup
        k, settled_s = settled(self.step_compute_s)
        compute = math.fsum(self.step_compute_s)
        compile_s = math.fsum(t - settled_s for t in self.step_compute_s[:k]) if settled_s is not None else 0.0
        parts["compile_s"] += compile_s
        parts["steps_s"] += compute - compile_s
        for name, s in self.carried.items():
            parts[name] = parts.get(name, 0.0) + s
        wall += self.carried_wall_s
        total = math.fsum(parts.values())
        return Goodput(
            wall_s=wall, parts_s={p: parts[p] for p in PARTS}, unaccounted_s=wall - total,
            goodput=parts[PRODUCTIVE] / wall if wall > 0 else None, settled_step_s=settled_s, compile_steps=k,
            startup_from="process start" if start_boot is not None else "harness entry (an in-process run)",
        )

    def close(self, end: float | None = None) -> Goodput:
        """The account at `end`. Idempotent: the first close is the record."""
        if self.closed is None:
            self.closed = self.compute(end)
        return self.closed

    def carry(self, snapshot: dict[str, float], wall_s: float, lost_s: float, recovery_s: float) -> None:
        """This attempt continues a job: an earlier attempt's account up to its checkpoint (`snapshot`, `wall_s`),
        the work it did after that checkpoint and lost (`lost_s`), and the gap until this process started."""
        self.carried = {**snapshot}
        self.carried["lost_s"] = self.carried.get("lost_s", 0.0) + lost_s
        self.carried["recovery_s"] = self.carried.get("recovery_s", 0.0) + recovery_s
        self.carried_wall_s = wall_s + lost_s + recovery_s


@dataclass
class Goodput:
    wall_s: float
    parts_s: dict[str, float]
    unaccounted_s: float
    goodput: float | None
    settled_step_s: float | None
    compile_steps: int
    startup_from: str

    def as_record(self) -> dict[str, object]:
        return {"wall_s": self.wall_s, "parts_s": self.parts_s, "unaccounted_s": self.unaccounted_s,
                "goodput": self.goodput, "settled_step_s": self.settled_step_s, "compile_steps": self.compile_steps,
                "startup_from": self.startup_from}

"""A recorded host load read back: was the machine shared while the run was timed?

The fingerprint records the 1-minute load at the run's start and end (suite/measure/fingerprint.py); compare, the
site and the summary read it through here, so they all draw the line in the same place.
"""

from __future__ import annotations

from typing import Any

HIGH_LOAD_PER_CORE = 1.0  # a 1-min load above the core count means the run competed for the CPUs


def high_load(load_avg: list[float] | None, cpu_cores: int) -> bool:
    """True when the host's 1-minute load was above its core count: the run shared the machine."""
    return bool(load_avg) and load_avg[0] > HIGH_LOAD_PER_CORE * max(1, cpu_cores)  # type: ignore[index]


def load_warning(hardware: Any) -> str | None:
    """A sentence for compare and the site when a run's host was loaded at its start or end, else None."""
    cores = getattr(hardware, "cpu_cores", 1) or 1
    loads: list[list[float]] = [v for v in (getattr(hardware, "load_avg_start", None),
                                            getattr(hardware, "load_avg_end", None)) if v]
    worst = [v[0] for v in loads if high_load(v, cores)]
    if not worst:
        return None
    peak = max(worst)
    return f"host load {peak:g} on {cores} cores during the run: timings may be slowed by other work"

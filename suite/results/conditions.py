"""The conditions a run was timed under, read back from its record: a shared host, a pause.

The fingerprint records the 1-minute load at the run's start and end (suite/measure/fingerprint.py), the harness the
highest while its clock ran (load_avg_max, suite/measure/host_share.py), the pause watch
a `paused:` warning (suite/measure/pauses.py); compare, the index, the site and the summary read them through here,
so they all draw the line in the same place.
"""

from __future__ import annotations

from typing import Any

PAUSE_PREFIX = "paused:"  # how a result's warning about a pause begins (compare and the index look for it)
HIGH_LOAD_PER_CORE = 1.0  # a 1-min load above the core count means the run competed for the CPUs


def high_load(load_avg: list[float] | None, cpu_cores: int) -> bool:
    """True when the host's 1-minute load was above its core count: the run shared the machine."""
    return bool(load_avg) and load_avg[0] > HIGH_LOAD_PER_CORE * max(1, cpu_cores)  # type: ignore[index]


def load_warning(hardware: Any) -> str | None:
    """A sentence for compare and the site when a run's host was loaded at its start or end, else None."""
    cores = getattr(hardware, "cpu_cores", 1) or 1
    loads: list[list[float]] = [v for v in (getattr(hardware, "load_avg_start", None),
                                            getattr(hardware, "load_avg_max", None),
                                            getattr(hardware, "load_avg_end", None)) if v]
    worst = [v[0] for v in loads if high_load(v, cores)]
    if not worst:
        return None
    peak = max(worst)
    return f"host load {peak:g} on {cores} cores during the run: timings may be slowed by other work"


def pause_warning(warnings: list[str]) -> str | None:
    """The first pause warning among a result's warnings (what compare and the index carry), else None."""
    return next((w for w in warnings if w.startswith(PAUSE_PREFIX)), None)

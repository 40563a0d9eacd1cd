"""Words the CLI adds where a number would mislead: a loaded host, a GEMM far below the peak table, a backend
that has never run on its hardware. Pure functions of what they are given, plus `host_load()` to read it."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# backends whose hardware path has never produced a result in this project's own CI (no such runner yet)
HARDWARE_UNTESTED = {"npu"}
FAR_BELOW = 0.10  # a measured GEMM under 10% of the table's peak is not the device's peak


def host_load() -> tuple[float, int]:
    """(1-minute load average, usable cores); (0.0, cores) where the OS has no load average."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        return os.getloadavg()[0], cores
    except (OSError, AttributeError):
        return 0.0, cores


def is_loaded(load: float, cores: int) -> bool:
    """More runnable processes than cores: each timed process gets less than a core."""
    return load > max(1, cores)


def peak_notes(measured_flops_per_s: float, table_flops_per_s: float | None, load: float, cores: int) -> list[str]:
    """Warnings for `env --peak`: a loaded host, a measurement far below the table."""
    notes = []
    if is_loaded(load, cores):
        notes.append(f"the host is loaded (load average {load:.1f} on {cores} cores): the measured GEMM shares the "
                     "cores with other processes and is not this device's peak; measure on a quiet host")
    if table_flops_per_s and measured_flops_per_s < FAR_BELOW * table_flops_per_s:
        notes.append(f"the measured GEMM is {measured_flops_per_s / table_flops_per_s:.1%} of the table's peak, "
                     f"far below it (a loaded host, too few --threads, or a table entry that does not fit this "
                     "device); MFU still divides by the table's peak")
    return notes


def hardware_tested(results: Path, backends: Iterable[str] = HARDWARE_UNTESTED) -> set[tuple[str, str]]:
    """(workload, backend) pairs with at least one result file under results/<hw>/<domain>/<name>/<backend>/,
    found by the results' one walk (suite.results.tree: no symlink followed out of the folder)."""
    from suite.results.tree import INDEX_DIR, walk_folders

    wanted = set(backends)
    found: set[tuple[str, str]] = set()
    if not results.is_dir():
        return found
    base = len(str(results)) + 1
    for folder, names, _ in walk_folders(results, skip=(INDEX_DIR,)):
        parts = folder[base:].split(os.sep)
        if len(parts) == 4 and parts[3] in wanted and any(n.endswith(".json") for n in names):
            found.add((f"{parts[1]}/{parts[2]}", parts[3]))
    return found


def recorded_load(hardware: Any) -> tuple[float, int] | None:
    """(the higher 1-minute load a result recorded, at its start or end; its cores) when that load was high by
    compare's rule (suite.results.conditions.high_load), else None (a quiet run, or no load recorded: an OS without
    a load average, a result of an older trainbench)."""
    from suite.results.conditions import high_load

    cores = int(getattr(hardware, "cpu_cores", 1) or 1)
    loads = [v for v in (getattr(hardware, "load_avg_start", None), getattr(hardware, "load_avg_max", None),
                         getattr(hardware, "load_avg_end", None)) if v]
    high = [v[0] for v in loads if high_load(v, cores)]
    return (max(high), cores) if high else None


def budget_note(results: Iterable[Any], limits: dict[str, tuple[float, int | None]]) -> str | None:
    """One line when runs ended on their wall-clock budget while their host was loaded (it reads like a
    regression, and may be the machine). The load is the one each result recorded (hardware.load_avg_start
    and _end), so the note says what the record says, not how busy the machine is when the summary prints.
    `limits`: workload -> (budget.max_train_s, budget.max_steps)."""
    hit: list[tuple[str, float, int]] = []
    for r in results:
        max_s, max_steps = limits.get(r.workload, (None, None))
        if r.status != "budget" or max_s is None or (max_steps is not None and r.steps >= max_steps):
            continue  # not a time budget: the run ended on its step budget, or did not end on a budget
        load = recorded_load(r.hardware)
        if load is not None:
            hit.append((f"{r.workload} seed {r.seed}", *load))
    if not hit:
        return None
    _, peak, cores = max(hit, key=lambda h: h[1])
    names = [h[0] for h in hit]
    return (f"note: {len(hit)} run(s) hit their time budget (budget.max_train_s) on a loaded host (recorded load "
            f"average up to {peak:.1f} on {cores} cores): {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}. "
            "This may be the machine, not a regression: rerun on a quiet host before comparing")

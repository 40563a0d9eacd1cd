"""The shape of a published MLPerf Training submission, walked without following a link out of it.

A submitter folder holds `results/<system>/<benchmark>/result_N.txt` and `systems/<system>.json`; a results
repository (mlcommons/training_results_vX.Y) holds one such folder per submitter. Anything that is not what it
should be (a link leading out of the tree, a missing or malformed system description, a benchmark the round does
not know) is reported as a `Bad` entry naming the path, and the walk goes on.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the fields the result summarizer reads from a system description (a row cannot be made without them)
SYSTEM_FIELDS = ("division", "status", "submitter", "system_name", "host_processor_model_name", "number_of_nodes",
                 "host_processor_core_count", "host_processors_per_node", "accelerator_model_name",
                 "accelerators_per_node", "framework", "hw_notes", "sw_notes")
MAX_SYSTEM_BYTES = 1024 * 1024
_RESULT = re.compile(r"^result_\d+\.txt$")
_ROUND = re.compile(r"training_results_v(\d+)\.(\d+)")


@dataclass
class Bad:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class BenchmarkDir:
    submitter_dir: str
    system: str
    benchmark: str
    path: str
    logs: list[str] = field(default_factory=list)  # result_N.txt inside the tree, sorted
    scaling_factor: float = 1.0  # scaling.json beside the logs (the review committee's or the RCP checker's)


@dataclass
class SystemDesc:
    name: str
    path: str
    desc: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class Walk:
    root: str
    benchmarks: list[BenchmarkDir] = field(default_factory=list)
    systems: dict[tuple[str, str], SystemDesc] = field(default_factory=dict)  # (submitter_dir, system)
    bad: list[Bad] = field(default_factory=list)


def round_of(path: Path) -> str | None:
    """`5.1.0` for a path inside training_results_v5.1, else None (the user names it)."""
    m = _ROUND.search(str(path.resolve()))
    return f"{m.group(1)}.{m.group(2)}.0" if m else None


def is_submitter(folder: Path) -> bool:
    return (folder / "results").is_dir() and (folder / "systems").is_dir()


def submitter_dirs(root: Path) -> list[Path]:
    if is_submitter(root):
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and is_submitter(p))


def _inside(real_root: str, path: str) -> bool:
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def walk(root: Path, known_benchmarks: set[str]) -> Walk:
    real_root = os.path.realpath(root)
    out = Walk(root=str(root))
    for sub in submitter_dirs(root):
        results = sub / "results"
        for system_dir in sorted(results.iterdir()):
            if not system_dir.is_dir():
                continue
            if not _inside(real_root, str(system_dir)):
                out.bad.append(Bad(str(system_dir), f"a link out of {root} (to {os.path.realpath(system_dir)}); not followed"))
                continue
            system = system_dir.name
            out.systems[(str(sub), system)] = read_system(sub, system, real_root)
            for bench_dir in sorted(system_dir.iterdir()):
                if not bench_dir.is_dir():
                    continue
                if not _inside(real_root, str(bench_dir)):
                    out.bad.append(Bad(str(bench_dir), f"a link out of {root}; not followed"))
                    continue
                entry = BenchmarkDir(str(sub), system, bench_dir.name, str(bench_dir))
                for name in sorted(os.listdir(bench_dir)):
                    p = bench_dir / name
                    if not _RESULT.match(name):
                        continue
                    if p.is_symlink() and not _inside(real_root, str(p)):
                        out.bad.append(Bad(str(p), f"a link out of {root} (to {os.path.realpath(p)}); not followed"))
                        continue
                    entry.logs.append(str(p))
                try:
                    entry.scaling_factor = scaling_factor(bench_dir)
                except ValueError as e:
                    out.bad.append(Bad(str(bench_dir / "scaling.json"), str(e)))
                if bench_dir.name not in known_benchmarks:
                    for log in entry.logs:
                        out.bad.append(Bad(log, f"benchmark {bench_dir.name!r} is not one of this round's "
                                                f"({', '.join(sorted(known_benchmarks))})"))
                    continue
                out.benchmarks.append(entry)
    return out


def scaling_factor(bench_dir: Path) -> float:
    path = bench_dir / "scaling.json"
    if not path.is_file():
        return 1.0
    try:
        factor = json.loads(path.read_text(encoding="utf-8"))["scaling_factor"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"not a scaling file ({type(e).__name__}: {e})") from None
    if not isinstance(factor, int | float) or isinstance(factor, bool):
        raise ValueError(f"scaling_factor {factor!r} is not a number")
    return float(factor)


def read_system(sub: Path, system: str, real_root: str) -> SystemDesc:
    path = sub / "systems" / f"{system}.json"
    entry = SystemDesc(system, str(path))
    try:
        if path.is_symlink() and not _inside(real_root, str(path)):
            entry.error = "a link out of the tree; not followed"
            return entry
        size = path.stat().st_size
        if size > MAX_SYSTEM_BYTES:
            entry.error = f"{size} bytes is not a system description"
            return entry
        desc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        entry.error = "missing (every result of this system is skipped)"
        return entry
    except (OSError, UnicodeDecodeError, ValueError) as e:
        entry.error = f"not a system description: {type(e).__name__}: {e}"
        return entry
    if not isinstance(desc, dict):
        entry.error = "not a system description: the top level is not a JSON object"
        return entry
    missing = [k for k in SYSTEM_FIELDS if k not in desc]
    if missing:
        entry.error = f"missing field(s) {', '.join(missing)}"
        return entry
    try:
        int(desc["accelerators_per_node"]), int(desc["number_of_nodes"]), int(desc["host_processors_per_node"])
    except (TypeError, ValueError) as e:
        entry.error = f"a count is not an integer: {e}"
        return entry
    entry.desc = desc
    return entry

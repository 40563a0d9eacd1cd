"""MLPerf's score of a system on a benchmark, as `mlperf_logging.result_summarizer` computes it.

Per system x benchmark folder: every `result_N.txt` that passes the compliance checker and has run_start and
run_stop gives minutes = (run_stop - run_start) / 60,000; a run that fails counts as dropped. With at most one
dropped run (four for unet3d) the score is the olympic mean (the fastest and the slowest dropped, a dropped run
standing for the slowest) times the folder's RCP scaling factor (`scaling.json`, the normalization the RCP
checker writes when a submission converges in fewer samples than the reference); with more it is infinite (the
summarizer's empty cell). Rows carry the same columns as the summarizer's CSV, so the two can be compared cell
by cell (tests/mlperf/test_score.py runs the summarizer live).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.mlperf.logs import LogInfo
from suite.mlperf.tree import BenchmarkDir, SystemDesc, Walk

ID_COLUMNS = ("division", "availability", "submitter", "system", "number_of_nodes", "host_processor_model_name",
              "host_processors_count", "accelerator_model_name", "accelerators_count", "framework", "notes",
              "private_id")


@dataclass
class Score:
    """One system x benchmark: the score in minutes (inf: too many runs dropped) and what it was made of."""

    minutes: float
    runs: int
    dropped: int
    max_dropped: int
    scaling_factor: float
    counted_minutes: list[float] = field(default_factory=list)


def max_dropped(benchmark: str) -> int:
    return 4 if benchmark == "unet3d" else 1


def olympic(minutes: list[float], dropped: int, max_drop: int) -> float | None:
    """result_summarizer._compute_olympic_average: sort, drop max_drop from the bottom and (max_drop - dropped)
    from the top (a dropped run is the slowest), average the rest; None when nothing remains."""
    scores = sorted(minutes)
    countable = scores[max_drop:len(scores) - (max_drop - dropped)]
    if not countable:
        return None
    return sum(countable) * 1.0 / len(countable)


def score_benchmark(bench: BenchmarkDir, infos: dict[str, LogInfo]) -> Score:
    minutes, dropped = [], 0
    for log in bench.logs:
        info = infos.get(log)
        if info is not None and info.score_valid and info.time_to_train_ms is not None:
            minutes.append(info.time_to_train_ms / 60 / 1000)
        else:
            dropped += 1
    md = max_dropped(bench.benchmark)
    value = None
    if dropped <= md:
        avg = olympic(minutes, dropped, md)
        value = None if avg is None else avg * bench.scaling_factor
    return Score(math.inf if value is None else value, len(bench.logs), dropped, md, bench.scaling_factor,
                 sorted(minutes))


def _pretty_framework(framework: str) -> str:
    if "TensorFlow" in framework:
        commit = re.search(r" commit hash = .*", framework)
        if commit:
            return framework.replace(commit.group(0), "")
    return framework


def system_columns(desc: dict[str, Any]) -> dict[str, Any]:
    """The identity columns of the summarizer's row, from a system description."""
    name = desc["system_name"]
    if name == "tpu-v3":
        name = f"TPUv3.{int(desc['accelerators_per_node']) * 2}"
    accel = "TPUv3" if desc["accelerator_model_name"] == "tpu-v3" else desc["accelerator_model_name"]
    return {
        "division": desc["division"], "availability": desc["status"], "submitter": desc["submitter"],
        "system": name, "number_of_nodes": desc["number_of_nodes"],
        "host_processor_model_name": desc["host_processor_model_name"],
        "host_processors_count": int(desc["host_processors_per_node"]) * int(desc["number_of_nodes"]),
        "accelerator_model_name": accel,
        "accelerators_count": int(desc["accelerators_per_node"]) * int(desc["number_of_nodes"]),
        "framework": _pretty_framework(desc["framework"]),
        "notes": ";".join(s for s in (desc["hw_notes"], desc["sw_notes"]) if s), "private_id": "",
    }


@dataclass
class Row:
    submitter_dir: str
    system_file: str  # the system's folder name (= systems/<name>.json)
    columns: dict[str, Any]
    scores: dict[str, Score]  # by benchmark

    def url(self, ruleset: str) -> str:
        short = ruleset[:3] + ruleset[3:].replace(".0", "")
        return (f"https://github.com/mlcommons/training_results_v{short}/blob/main/{self.columns['submitter']}/"
                f"systems/{self.system_file}.json")


def summarize(walk: Walk, infos: dict[str, LogInfo]) -> list[Row]:
    """One row per system whose description is usable, every benchmark folder of it scored."""
    by_system: dict[tuple[str, str], list[BenchmarkDir]] = {}
    for bench in walk.benchmarks:
        by_system.setdefault((bench.submitter_dir, bench.system), []).append(bench)
    rows = []
    for (sub, system), entry in sorted(walk.systems.items()):
        if entry.desc is None:
            continue
        benches = by_system.get((sub, system), [])
        if not benches:
            continue
        rows.append(Row(sub, system, system_columns(entry.desc),
                        {b.benchmark: score_benchmark(b, infos) for b in benches}))
    return rows


def system_of(walk: Walk, bench: BenchmarkDir) -> SystemDesc | None:
    return walk.systems.get((bench.submitter_dir, bench.system))


# ---- the summarizer's CSV, read back for comparison --------------------------------------------------------


def read_summary_csv(path: Path) -> list[dict[str, str]]:
    """The strong-scaling rows of a summarizer CSV (it appends a `_detailed.csv` beside; this file has one table)."""
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


@dataclass
class Comparison:
    rows: int = 0
    cells: int = 0
    largest_rel: float = 0.0
    mismatches: list[str] = field(default_factory=list)


def compare_with_summary(rows: list[Row], summary: list[dict[str, str]], benchmarks: list[str],
                         rel_tol: float = 1e-9) -> Comparison:
    """Cell by cell: every summarizer row matched to ours by its identity columns and system URL; a score
    equal within rel_tol, an empty cell (dropped, infinite, or no such folder) matching only an empty cell."""
    cmp = Comparison()

    def ident(cols: dict[str, Any]) -> tuple[str, ...]:
        return tuple(str(cols[c]) if cols[c] is not None else "" for c in ID_COLUMNS[:-1]) + (
            str(cols.get("details_url", "")),)

    ours: dict[tuple[str, ...], Row] = {}
    for row in rows:
        ours[ident({**row.columns, "details_url": row.url(_ruleset_of(summary))})] = row
    theirs = {ident(r): r for r in summary}
    for key in sorted(set(ours) | set(theirs)):
        if key not in theirs:
            cmp.mismatches.append(f"{key[3]} ({key[-1]}): a row here, none in the summarizer's CSV")
            continue
        if key not in ours:
            cmp.mismatches.append(f"{key[3]} ({key[-1]}): a row in the summarizer's CSV, none here")
            continue
        cmp.rows += 1
        row, their = ours[key], theirs[key]
        for bench in benchmarks:
            cmp.cells += 1
            s = row.scores.get(bench)
            mine = None if s is None or math.isinf(s.minutes) else s.minutes
            cell = their.get(bench, "")
            other = float(cell) if cell not in ("", None) else None
            if mine is None and other is None:
                continue
            if mine is None or other is None:
                cmp.mismatches.append(f"{key[3]} / {bench}: here {mine}, summarizer {other}")
                continue
            rel = abs(mine - other) / max(abs(other), 1e-300)
            cmp.largest_rel = max(cmp.largest_rel, rel)
            if rel > rel_tol:
                cmp.mismatches.append(f"{key[3]} / {bench}: here {mine!r}, summarizer {other!r} (rel {rel:.3g})")
    return cmp


def _ruleset_of(summary: list[dict[str, str]]) -> str:
    for r in summary:
        m = re.search(r"training_results_v(\d+)\.(\d+)", r.get("details_url", ""))
        if m:
            return f"{m.group(1)}.{m.group(2)}.0"
    return "5.1.0"


def write_csv(rows: list[Row], path: Path, ruleset: str) -> Path:
    """The summarizer's strong-scaling CSV columns: identity, one column per benchmark of the round (minutes;
    empty where the system has no such folder or the score is infinite), then the system's URL."""
    from mlperf_logging.benchmark_meta import get_allowed_benchmarks

    benchmarks = list(get_allowed_benchmarks("training", ruleset))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow([*ID_COLUMNS, *benchmarks, "details_url"])
        for row in rows:
            cells = []
            for b in benchmarks:
                s = row.scores.get(b)
                cells.append("" if s is None or math.isinf(s.minutes) else repr(s.minutes))
            w.writerow([*(row.columns[c] for c in ID_COLUMNS), *cells, row.url(ruleset)])
    return path

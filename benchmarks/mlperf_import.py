"""MLPerf import benchmark (issue 44, point 6): `trainbench results import-mlperf` against mlperf_logging's own
result_summarizer over the same submitter folders, side by side, and a second import of the same folder.

Both read a fresh copy of the published logs (the summarizer writes scaling.json into what it reads). Timed, wall
seconds, each as a user runs it (a new process, start-up included):

  import_s        `trainbench results import-mlperf COPY --results R --scores-csv` into an empty results folder:
                  every log parsed and compliance-checked (processes over the cores), scored, written
  summarizer_s    `python -m mlperf_logging.result_summarizer 'COPY/{A,B,...}' training 5.1.0 -csv` (one process,
                  every submitter, as MLCommons runs it)
  reimport_s      the same import again: nothing new, nothing written
  ratio           import_s / summarizer_s (the promise: at most 0.5)

and the two score tables compared cell by cell (rows, cells, largest relative difference, mismatches).

    PYTHONPATH=$PWD python benchmarks/mlperf_import.py [--src ../shared/mlperf/training_results_v5.1] [--repeats 1]

Prints one JSON line (also written to benchmarks/out/mlperf_import.json), with the host load before and after.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ID = ("division", "availability", "submitter", "system", "number_of_nodes", "host_processor_model_name",
      "host_processors_count", "accelerator_model_name", "accelerators_count", "framework", "notes", "details_url")


def load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, p


def compare(ours: Path, theirs: Path) -> dict:
    def rows(path: Path) -> dict[tuple, dict[str, str]]:
        with path.open(encoding="utf-8", newline="") as f:
            return {tuple(r[c] for c in ID): r for r in csv.DictReader(f)}

    a, b = rows(ours), rows(theirs)
    benchmarks = [c for c in next(iter(b.values())) if c not in ID and c not in ("private_id", "code_url")]
    out = {"rows_ours": len(a), "rows_summarizer": len(b), "rows_compared": 0, "cells": 0, "empty_cells": 0,
           "largest_rel": 0.0, "mismatches": []}
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            out["mismatches"].append(f"row only {'here' if key in a else 'in the summarizer'}: {key[2]} {key[3]}")
            continue
        out["rows_compared"] += 1
        for bench in benchmarks:
            out["cells"] += 1
            x, y = a[key].get(bench, ""), b[key].get(bench, "")
            if x == "" and y == "":
                out["empty_cells"] += 1
                continue
            if (x == "") != (y == ""):
                out["mismatches"].append(f"{key[3]} / {bench}: here {x!r}, summarizer {y!r}")
                continue
            rel = abs(float(x) - float(y)) / abs(float(y))
            out["largest_rel"] = max(out["largest_rel"], rel)
            if not rel <= 1e-9 or math.isnan(rel):
                out["mismatches"].append(f"{key[3]} / {bench}: here {x}, summarizer {y}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", type=Path, default=ROOT.parent.parent / "shared" / "mlperf" / "training_results_v5.1")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    if not args.src.is_dir():
        args.src = Path("/work/shared/mlperf/training_results_v5.1")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    report: dict = {"src": str(args.src), "cpus": os.cpu_count(), "load_before": load(), "runs": []}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="mlperf-import-") as tmp:
            work = Path(tmp) / "training_results_v5.1"
            shutil.copytree(args.src, work)
            for p in work.rglob("*"):
                p.chmod(0o755 if p.is_dir() else 0o644)
            logs = sum(1 for _ in work.glob("*/results/*/*/result_*.txt"))
            results, ours_csv, their_csv = Path(tmp) / "results", Path(tmp) / "ours.csv", Path(tmp) / "summary.csv"
            cmd = [sys.executable, "-m", "suite.cli", "results", "import-mlperf", str(work), "--results", str(results),
                   "--scores-csv", str(ours_csv)]
            import_s, p = timed(cmd, env)
            assert p.returncode in (0, 1), p.stderr[-2000:]
            subs = ",".join(sorted(d.name for d in work.iterdir() if (d / "results").is_dir()))
            summarizer_s, q = timed([sys.executable, "-m", "mlperf_logging.result_summarizer", f"{work}/{{{subs}}}",
                                     "training", "5.1.0", "-csv", str(their_csv)], env)
            assert q.returncode == 0, q.stderr[-2000:]
            reimport_s, r = timed(cmd[:-2], env)
            report["runs"].append({
                "logs": logs, "import_s": round(import_s, 2), "summarizer_s": round(summarizer_s, 2),
                "reimport_s": round(reimport_s, 2), "ratio": round(import_s / summarizer_s, 3),
                "import_out": p.stdout.strip()[-300:], "reimport_out": r.stdout.strip()[-300:],
                "scores": compare(ours_csv, their_csv), "load_after": load()})
    report["load_after"] = load()
    line = json.dumps(report)
    out = ROOT / "benchmarks" / "out" / "mlperf_import.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(line + "\n", encoding="utf-8")
    print(line)


if __name__ == "__main__":
    main()

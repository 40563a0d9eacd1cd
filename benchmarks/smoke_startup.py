"""Wall time of the smoke tier through the CLI, warm (fork server, shared GEMM peak) vs cold (a fresh
interpreter per run, as before), beside the timed training inside it.

    python benchmarks/smoke_startup.py [--repeats 3] [--out benchmarks/out/smoke_startup.json]

The goals: the smoke tier under 30 s of wall time on 2 quiet cores (issue 13); wall <= 1.25 x the runs' summed
clocks (issue 29: `wall_over_timed`; the smoke runs stop at their target, so their clock is their time to
target). Where the rest goes is split from each run's start, init and clock: before the first run's start
(driver and fork server start-up), the runs' untimed init, between runs, after the last. Each repeat runs
`trainbench run --tier smoke` once warm and once cold, alternating, into fresh results folders; the figure
is the median wall time (perf_counter around the whole command), and `timed_s` the sum of the runs' own
`total_s` (the clock MLPerf's rules define), so `wall - timed` is what isolation and start-up cost. Not a
test: say which machine and how loaded (`uptime` is recorded) beside any figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(cold: bool, threads: int | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "suite.cli", "run", "--tier", "smoke", "--results", tmp, "--json", "--quiet"]
        if threads:
            cmd += ["--threads", str(threads)]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINBENCH_COLD_START": "1" if cold else "0"}
        t, start_epoch = time.perf_counter(), time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        wall = time.perf_counter() - t
        rows = json.loads(p.stdout[p.stdout.index("["):]) if "[" in p.stdout else []
        runs = [r for r in (json.loads(f.read_text()) for f in Path(tmp).rglob("*.json")) if "total_s" in r]
    runs.sort(key=lambda r: r["started_at"])
    timed = sum(r["total_s"] for r in runs)
    # where the wall time beyond the runs' clocks goes, from each run's start (Run created: started_at) and
    # its init and clock: before the first run, each run's init, the gaps between runs, after the last
    starts = [datetime.fromisoformat(r["started_at"].replace("Z", "+00:00")).timestamp() for r in runs]
    ends = [s + r["init_s"] + r["total_s"] for s, r in zip(starts, runs, strict=True)]
    return {"cold": cold, "wall_s": wall, "timed_s": timed, "init_s": sum(r["init_s"] for r in runs),
            "tta_s": sum(r["time_to_target_s"] or 0.0 for r in runs),
            "before_first_run_s": starts[0] - start_epoch if runs else None,
            "between_runs_s": sum(b - a for a, b in zip(ends, starts[1:], strict=False)) if runs else None,
            "after_last_run_s": start_epoch + wall - ends[-1] if runs else None,
            "runs": len(rows), "statuses": [r["status"] for r in rows], "rc": p.returncode}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    load_before = os.getloadavg()
    trials = []
    for i in range(args.repeats):
        for cold in ((False, True) if i % 2 == 0 else (True, False)):
            trials.append(one(cold, args.threads))
            print(json.dumps(trials[-1]), flush=True)
    summary = {}
    for label, cold in (("warm", False), ("cold", True)):
        mine = [t for t in trials if t["cold"] is cold]
        summary[label] = {k: statistics.median(t[k] for t in mine if t[k] is not None)
                          for k in ("wall_s", "timed_s", "tta_s", "init_s", "before_first_run_s", "between_runs_s",
                                    "after_last_run_s") if any(t[k] is not None for t in mine)}
        # per trial, then the median: a neighbour's burst stretches one trial's runs and wall together
        summary[label]["wall_over_timed"] = statistics.median(t["wall_s"] / max(t["timed_s"], 1e-9) for t in mine)
    report = {"machine": os.uname().nodename, "cpu": _cpu_model(), "cores": os.cpu_count(), "load_before": load_before,
              "load_after": os.getloadavg(), "repeats": args.repeats, "median": summary, "trials": trials}
    print(json.dumps({k: report[k] for k in ("cpu", "cores", "load_before", "load_after", "repeats", "median")},
                     indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Wall time of the smoke tier through the CLI, warm (fork server, shared GEMM peak) vs cold (a fresh
interpreter per run, as before), beside the timed training inside it.

    python benchmarks/smoke_startup.py [--repeats 3] [--out benchmarks/out/smoke_startup.json]

The goal (issue 13): the smoke tier under 30 s of wall time on 2 quiet cores. Each repeat runs
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(cold: bool, threads: int | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "suite.cli", "run", "--tier", "smoke", "--results", tmp, "--json", "--quiet"]
        if threads:
            cmd += ["--threads", str(threads)]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINBENCH_COLD_START": "1" if cold else "0"}
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        wall = time.perf_counter() - t
        rows = json.loads(p.stdout[p.stdout.index("["):]) if "[" in p.stdout else []
        timed = sum(json.loads(f.read_text())["total_s"] for f in Path(tmp).rglob("*.json"))
        init = sum(json.loads(f.read_text())["init_s"] for f in Path(tmp).rglob("*.json"))
    return {"cold": cold, "wall_s": wall, "timed_s": timed, "init_s": init, "runs": len(rows),
            "statuses": [r["status"] for r in rows], "rc": p.returncode}


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
        summary[label] = {k: statistics.median(t[k] for t in mine) for k in ("wall_s", "timed_s", "init_s")}
    report = {"machine": os.uname().nodename, "cores": os.cpu_count(), "load_before": load_before,
              "load_after": os.getloadavg(), "repeats": args.repeats, "median": summary, "trials": trials}
    print(json.dumps(report["median"], indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time to target of every workload of a tier, over several seeds: the medians the tier promises are judged by.

    python benchmarks/tta_tiers.py --tier smoke --seeds 3 [--threads 2] [--out benchmarks/out/smoke.json]

Each workload runs under the real CLI (`python -m suite.cli run`, one process, the torch backend), so the
figure includes nothing the harness does not. A run that misses its target counts as infinite (MLPerf/
AlgoPerf), so a median over 3 seeds is finite only when at least 2 reached. Not a test: timings depend on
the machine and on its neighbours; say which machine, and whether it was contended, beside any figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMITS_S = {"smoke": 60.0, "standard": 600.0}  # per-workload median promised by the tier (issue 3)
TIER_TOTAL_S = {"smoke": 300.0}


def workloads_of(tier: str) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from suite import registry
    from suite.specload import load_spec

    return [name for name, path in registry.workload_files().items() if tier in load_spec(path).tiers]


def run_one(name: str, seed: int, threads: int | None, results: Path) -> dict:
    cmd = [sys.executable, "-m", "suite.cli", "run", name, "--seed", str(seed), "--results", str(results),
           "--json", "--quiet"]
    if threads:
        cmd += ["--threads", str(threads)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    try:
        (row,) = json.loads(proc.stdout)
    except (json.JSONDecodeError, ValueError):
        return {"workload": name, "seed": seed, "status": "error", "time_to_target_s": None, "wall_s": wall,
                "error": (proc.stderr or proc.stdout)[-500:]}
    return {"workload": name, "seed": seed, "status": row["status"], "time_to_target_s": row["time_to_target_s"],
            "steps": row["steps"], "final": row["final_metrics"], "wall_s": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tier", default="smoke", choices=["smoke", "standard"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: the harness's cores/procs)")
    ap.add_argument("--only", nargs="*", help="a subset of the tier's workloads")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    names = args.only or workloads_of(args.tier)
    rows, summary = [], {}
    t_tier = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tta-") as tmp:
        for name in names:
            times = []
            for seed in range(args.seeds):
                r = run_one(name, seed, args.threads, Path(tmp))
                rows.append(r)
                times.append(r["time_to_target_s"] if r["status"] == "reached" else math.inf)
                print(f"{name} seed {seed}: {r['status']} tta={r['time_to_target_s']} wall={r['wall_s']:.1f}s "
                      f"{r.get('final', r.get('error'))}", flush=True)
            med = statistics.median(times)
            limit = LIMITS_S.get(args.tier)
            summary[name] = {"median_tta_s": med if math.isfinite(med) else None, "seeds": args.seeds,
                             "reached": sum(math.isfinite(t) for t in times), "times_s": [
                                 t if math.isfinite(t) else None for t in times],
                             "within_limit": bool(limit and med < limit)}
    tier_wall = time.perf_counter() - t_tier
    load = os.getloadavg()
    report = {"tier": args.tier, "seeds": args.seeds, "threads": args.threads, "cpu_count": os.cpu_count(),
              "loadavg_at_end": load, "tier_wall_s": tier_wall, "workloads": summary, "runs": rows}
    print(f"\n{args.tier} tier on {os.cpu_count()} cores (load average at end {load[0]:.1f}): "
          f"{tier_wall:.0f} s for {len(names)} workloads x {args.seeds} seeds")
    for name, s in summary.items():
        med = f"{s['median_tta_s']:.1f} s" if s["median_tta_s"] is not None else "not reached"
        print(f"  {name:28s} median time to target {med:>12s}  ({s['reached']}/{s['seeds']} reached)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    ok = all(s["within_limit"] for s in summary.values()) if args.tier in LIMITS_S else True
    total = TIER_TOTAL_S.get(args.tier)
    return 0 if ok and (total is None or tier_wall / args.seeds < total) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Site scale benchmark: build the site from N results (default 10,000) and report build time and index size.

The promise (issue 7): 10,000 results build in under 10 s with an index under 1 MB. Results are real
Result objects written with suite.results.record.write_result into a temporary folder: 20 workloads x 4
hardware x 3 backends, one 5-seed submission a day per combination, 8 evaluations per curve. Run:

    PYTHONPATH=$PWD python benchmarks/site_scale.py [--results N] [--keep DIR]

Prints one JSON line; exits 1 when a budget is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.sim

from benchmarks.sim.results import T0, site_result  # noqa: E402
from suite.results.record import write_result  # noqa: E402
from suite.site.build import build_site  # noqa: E402

BUILD_BUDGET_S = 10.0
INDEX_BUDGET_BYTES = 1_000_000
HARDWARE = ("nvidia-h200-x8", "nvidia-a100-x8", "ascend-910b-x8", "cpu-amd-epyc-2c")
BACKENDS = ("torch", "deepspeed", "megatron")
SEEDS = 5


def populate(root: Path, n: int) -> int:
    workloads = [f"{d}/bench_{i:02d}" for i, d in enumerate(("cv", "nlp", "gnn", "rl") * 5)]
    combos = [(w, h, b) for w in workloads for h in HARDWARE for b in BACKENDS]
    written, day = 0, 0
    while written < n:
        for ci, (w, h, b) in enumerate(combos):
            base_tta = 5.0 + (ci % 17) * 3.0
            for seed in range(SEEDS):
                if written >= n:
                    return written
                reached = (seed + day + ci) % 23 != 0  # about one run in 23 misses its target
                r = site_result(
                    w, h, b, seed=seed, evals=8,
                    tta_s=base_tta * (1 - 0.002 * day) * (1 + 0.02 * seed) if reached else None,
                    status="reached" if reached else "budget",
                    started_at=T0 + timedelta(days=day, minutes=seed), sha=f"{day:040x}",
                )
                write_result(root, r)
                written += 1
        day += 1
    return written


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the forked page renderers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=int, default=10_000, help="number of result files")
    ap.add_argument("--keep", type=Path, help="keep the results and site here instead of a temp folder")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="trainbench-site-scale-"))
    res, out = work / "results", work / "site"
    try:
        t0 = time.perf_counter()
        if not res.exists():
            populate(res, args.results)
        populate_s = time.perf_counter() - t0
        shutil.rmtree(out, ignore_errors=True)
        cpu0 = _cpu_s()
        report = build_site(res, out)
        cpu = _cpu_s() - cpu0
        again = build_site(res, out)  # nothing new: every page is left as it is
        pages = sorted(out.rglob("*.html"))
        figures = {
            "results": report.results, "workloads": report.workloads, "pages": report.pages,
            "populate_s": round(populate_s, 2), "build_s": round(report.seconds, 2), "build_cpu_s": round(cpu, 2),
            "phases_s": report.phases_s, "rebuild_s": round(again.seconds, 2), "cpus": len(os.sched_getaffinity(0)),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "index_bytes": report.index_bytes, "largest_page_bytes": max(p.stat().st_size for p in pages),
            "site_bytes": sum(p.stat().st_size for p in out.rglob("*") if p.is_file()),
            "build_budget_s": BUILD_BUDGET_S, "index_budget_bytes": INDEX_BUDGET_BYTES,
        }
        ok = report.seconds < BUILD_BUDGET_S and report.index_bytes < INDEX_BUDGET_BYTES
        figures["ok"] = ok
        print(json.dumps(figures))
        return 0 if ok else 1
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())

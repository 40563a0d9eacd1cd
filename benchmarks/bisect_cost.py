"""How often does `trainbench bisect` name the right commit, and in how many comparisons?

Simulated timings (benchmarks/sim/bisect.py: benchmarks/sim/ab.py's noise model, each comparison decided by the gate's own
interval and verdict at its settings: 10 lockstep rounds of 200 steps, 2,000 resamples, 1% floor), over a range of
--commits commits with one --slowdown at a random commit (or two, --two), --trials times:

  PYTHONPATH=.:tests python benchmarks/bisect_cost.py [--trials 100] [--commits 16] [--slowdown 1.05] [--two]
        [--round-sd 0.05] [--run-sd 0.01] [--step-sd 0.05]

Prints one JSON object: the share found right, the statuses, the comparisons (mean, max, share within
ceil(log2 N) + 2), wrong culprits (must be 0) and the seconds. Not a test.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.sim.ab import Noise  # noqa: E402
from benchmarks.sim.bisect import comparator, levels  # noqa: E402
from suite.compare import bisect as bis  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--commits", type=int, default=16)
    ap.add_argument("--slowdown", type=float, default=1.05)
    ap.add_argument("--two", action="store_true", help="two slowdowns in the range")
    ap.add_argument("--round-sd", type=float, default=0.05)
    ap.add_argument("--run-sd", type=float, default=0.01)
    ap.add_argument("--step-sd", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    noise = Noise(round_sd=a.round_sd, run_sd=a.run_sd, step_sd=a.step_sd)
    commits = [f"{i:040x}" for i in range(a.commits)]
    limit = math.ceil(math.log2(a.commits)) + 2
    rng = np.random.default_rng(a.seed)
    right = wrong = within = 0
    statuses: collections.Counter[str] = collections.Counter()
    counts = []
    t = time.perf_counter()
    for _ in range(a.trials):
        at = sorted(rng.choice(np.arange(1, a.commits), size=2 if a.two else 1, replace=False).tolist())
        r = bis.bisect("w", "step_time", commits, comparator(levels(commits, dict.fromkeys(at, a.slowdown)), rng,
                                                             noise=noise))
        statuses[r.status] += 1
        counts.append(r.comparisons)
        within += r.comparisons <= limit
        want = [commits[i] for i in at]
        right += (r.culprits == want) if a.two else (r.status == bis.FOUND and r.culprit == want[0])
        wrong += r.culprit is not None and r.culprit != want[0]
    print(json.dumps({
        "trials": a.trials, "commits": a.commits, "slowdown": a.slowdown, "two": a.two, "noise": noise.__dict__,
        "right": right / a.trials, "wrong_culprit": wrong, "statuses": dict(statuses),
        "comparisons_mean": float(np.mean(counts)), "comparisons_max": int(max(counts)),
        f"within_{limit}": within / a.trials, "seconds": round(time.perf_counter() - t, 1)}, indent=1))


if __name__ == "__main__":
    main()

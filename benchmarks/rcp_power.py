"""How often does the convergence guard (MLPerf's RCP check, suite/compare/rcp_guard.py) cry wolf, and how often
does it catch a candidate that needs fewer samples than its reference?

Simulated seeds (benchmarks/sim/rcp.py: log-normal steps to target rounded up to the evaluation cadence, at
coefficients of variation spanning MLPerf 6.1's own RCPs), each set decided by mlperf_logging's checker through
rcp_guard.check_samples, the code compare runs:

  PYTHONPATH=.:tests python benchmarks/rcp_power.py [--sets 1000] [--cv 0.02,0.045,0.06,0.08,0.10]
        [--ref 20] [--cand 10] [--faster 0.10]

Prints one JSON object (per cv: the A/A false-alarm rate and the share of faster candidates flagged). Not a test.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.sim.rcp import rates  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", type=int, default=1000)
    ap.add_argument("--cv", default="0.02,0.045,0.06,0.08,0.10")
    ap.add_argument("--ref", type=int, default=20, help="reference seeds (MLPerf: twice a submission's)")
    ap.add_argument("--cand", type=int, default=10, help="candidate seeds")
    ap.add_argument("--faster", type=float, default=0.10, help="fewer samples the faster candidate needs")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    logging.disable(logging.CRITICAL)
    rows = []
    for cv in (float(x) for x in a.cv.split(",")):
        t = time.perf_counter()
        aa, ab = rates(np.random.default_rng(a.seed), a.sets, cv, a.ref, a.cand, a.faster)
        rows.append({"cv": cv, "false_alarm": aa, "caught": ab, "seconds": round(time.perf_counter() - t, 2)})
    print(json.dumps({"sets": a.sets, "reference_seeds": a.ref, "candidate_seeds": a.cand, "faster": a.faster,
                      "alpha": 0.05, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

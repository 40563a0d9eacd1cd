"""`trainbench bisect` for real, end to end: a generated 3-commit repository of this project whose last commit
spins 10 ms of CPU per forward (benchmarks/sim/git_repo.py), bisected with real `trainbench ab` comparisons
(shared deps, lockstep, 4 rounds of 30 steps, CPU clock: load-proof). It must end `found`, naming the last commit,
after two comparisons (`no change`, then `regressed`).

    PYTHONPATH=$PWD:$PWD/tests python benchmarks/bisect_real.py [--keep DIR]

Minutes of real runs (2 comparisons x 4 rounds: 4 min 9 s at load ~8 on 2 cores), so not a test: the simulated
bisect (tests/compare/test_bisect.py, benchmarks/bisect_cost.py) is. Exit 0 when the culprit is found.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.sim.git_repo import make_range_repo  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path, default=None, help="work here (kept) instead of a temporary folder")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        repo, shas = make_range_repo(where, 3, {2: 0.01}, spin=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "suite.cli", "bisect", "--repo", str(repo), "--good", shas[0],
                            "--bad", shas[2], "-w", "cv/digits_cnn", "--out", str(where / "b"), "--rounds", "4",
                            "--deps", "shared", "--threads", "1", "--set", "throughput.measure_steps=30",
                            "--set", "throughput.warmup_steps=3", "--set", "throughput.clock=cpu",
                            "--throughput-noise-floor", "0.05"], env=env, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if p.returncode != 0:
            print(p.stderr[-3000:], file=sys.stderr)
            return 1
        data = json.loads((where / "b" / "bisect.json").read_text())
        ok = (data["status"] == "found" and data["culprit"] == shas[2]
              and [x["verdict"] for x in data["tested"]] == ["no change", "regressed"])
        print(json.dumps({"ok": ok, "wall_s": round(wall, 1), "load": os.getloadavg(), "status": data["status"],
                          "culprit_is_the_slow_commit": data["culprit"] == shas[2],
                          "verdicts": [x["verdict"] for x in data["tested"]], "ratio": data.get("culprit_ratio")},
                         indent=1))
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

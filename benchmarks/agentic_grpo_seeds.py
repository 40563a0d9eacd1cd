"""rl/agentic_bugfix_grpo to its target: seeds on-policy (sync) and one step off-policy (async, staleness 1), each
through `trainbench run`, with the time to target, steps, the phases and the machine's load beside each.

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/agentic_grpo_seeds.py [--seeds 3] [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "workloads" / "rl" / "agentic_bugfix_grpo.yaml"
MODES = {"on-policy (sync)": ["--set", "grpo.rollout_mode=sync"],
         "off-policy (async, staleness 1)": ["--set", "grpo.rollout_mode=async", "--set", "grpo.staleness=1"]}


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"


def run(seed: int, extra: list[str], results: Path) -> dict:
    before = load()
    cmd = [sys.executable, "-m", "suite.cli", "run", str(SPEC), "--seed", str(seed), "--threads", "1", "--quiet",
           "--json", "--results", str(results), *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if out.returncode not in (0, 1):
        raise SystemExit(out.stderr[-2000:])
    (row,) = json.loads(out.stdout)
    full = json.loads(Path(row["path"]).read_text())  # the Result file: phases, steps to target
    return {**full, "load_before": before, "load_after": load()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--off-policy-seeds", type=int, default=1)
    ap.add_argument("--results", type=Path, default=Path(tempfile.mkdtemp(prefix="agentic-grpo-")))
    args = ap.parse_args()
    print("| mode | seed | status | time to target s | steps | gen | tool | reward | old_log_prob | update | "
          "weight_sync | wait | overlap s | mean turns | load before/after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for mode, extra in MODES.items():
        for seed in range(args.seeds if mode.startswith("on") else args.off_policy_seeds):
            r = run(seed, extra, args.results)
            ph = r.get("phases") or {}
            s = ph.get("seconds", {})
            print(f"| {mode} | {seed} | {r['status']} | {r.get('time_to_target_s')} | {r.get('steps_to_target') or r.get('steps')} | "
                  + " | ".join(f"{s.get(k, 0):.1f}" for k in ("gen", "tool", "reward", "old_log_prob", "update",
                                                                "weight_sync", "wait"))
                  + f" | {ph.get('overlap_s', 0):.1f} | {ph.get('mean_turns', 0):.2f} | "
                    f"{r['load_before']}/{r['load_after']} |", flush=True)


if __name__ == "__main__":
    main()

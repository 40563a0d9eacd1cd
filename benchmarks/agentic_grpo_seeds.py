"""rl/agentic_bugfix_grpo to its target: seeds on-policy (sync) and one step off-policy (async, staleness 1), each
through `trainbench run`, with the time to target, steps, the phases and the machine's load beside each.

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/agentic_grpo_seeds.py [--seeds 3] [--results DIR]
        [--first-seed 0] [--modes on,off] [--set KEY=VALUE ...]

`--set target.value=1.0` runs each seed to its budget (the whole curve, to choose a target from); the curve is
printed after each row.
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


def run(seed: int, extra: list[str], results: Path, sets: list[str]) -> dict:
    before = load()
    cmd = [sys.executable, "-m", "suite.cli", "run", str(SPEC), "--seed", str(seed), "--threads", "1", "--quiet",
           "--json", "--results", str(results), *extra,
           *[a for kv in sets for a in ("--set", kv)]]
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
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--modes", default="on,off", help="on: on-policy (sync); off: one step off-policy (async)")
    ap.add_argument("--set", action="append", default=[], dest="sets", help="KEY=VALUE passed to trainbench run")
    args = ap.parse_args()
    print("| mode | seed | status | time to target s | steps | gen | tool | reward | old_log_prob | update | "
          "weight_sync | wait | overlap s | mean turns | load before/after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for mode, extra in MODES.items():
        if mode.split("-")[0] not in args.modes.split(","):
            continue
        for seed in range(args.first_seed, args.first_seed + (args.seeds if mode.startswith("on")
                                                              else args.off_policy_seeds)):
            r = run(seed, extra, args.results, args.sets)
            ph = r.get("phases") or {}
            s = ph.get("seconds", {})
            print(f"| {mode} | {seed} | {r['status']} | {r.get('time_to_target_s')} | {r.get('steps_to_target') or r.get('steps')} | "
                  + " | ".join(f"{s.get(k, 0):.1f}" for k in ("gen", "tool", "reward", "old_log_prob", "update",
                                                                "weight_sync", "wait"))
                  + f" | {ph.get('overlap_s', 0):.1f} | {ph.get('mean_turns', 0):.2f} | "
                    f"{r['load_before']}/{r['load_after']} |", flush=True)
            print("    curve (step: pass@k, elapsed s): " + ", ".join(
                f"{p['step']}: {p['metrics'].get('pass_at_k', float('nan')):.3f} {p['elapsed_s']:.0f}"
                for p in r.get("eval_curve", [])), flush=True)


if __name__ == "__main__":
    main()

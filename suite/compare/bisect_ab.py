"""The real comparator of `trainbench bisect`: each comparison is one `trainbench ab` (suite/compare/ab.py: both
commits on this runner, one venv each, lockstep rounds) decided by `compare` at the gate's settings, exactly as the
PR workflow's A/B (scripts/ci/bench_ab.sh) decides. Worktrees and venvs are made once per commit (`ABPlan.cache`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from suite.compare import tta
from suite.compare.ab import ABPlan, run_ab
from suite.compare.bisect import METRICS, NO_CHANGE, NOT_COMPARABLE, Decision


def decision_of(report: tta.Report, workload: str, metric: str) -> Decision:
    """The gate's verdict on one workload: the pair's verdict and the metric's ratio and interval (or p)."""
    pairs = [p for p in report.pairs if p.workload == workload]
    if len(pairs) != 1:
        why = "no comparable pair" if not pairs else f"{len(pairs)} pairs (several hardware or backends)"
        return Decision(NOT_COMPARABLE, note=f"{workload}: {why}")
    p = pairs[0]
    m = p.metric(METRICS[metric])
    verdict = NO_CHANGE if p.verdict == tta.SAME else str(p.verdict)
    if m is None:
        return Decision(verdict, note=p.reason)
    return Decision(verdict, m.ratio, m.ci_low, m.ci_high, m.p_value, p.reason or m.note)


def ab_comparator(plan: ABPlan, workload: str, metric: str, settings: tta.Settings, floors: list[Path],
                  log: Callable[[str], None] = lambda _: None) -> Callable[[str, str, int], Decision]:
    """A Comparator running `trainbench ab` into plan.out/NN-<base>-<head>/ and `compare` on its two sides."""
    count = [0]

    def compare(base: str, head: str, rounds: int) -> Decision:
        count[0] += 1
        out = plan.out / f"{count[0]:02d}-{base[:8]}-{head[:8]}-r{rounds}"
        one = replace(plan, out=out, rounds=rounds, workloads=[workload],
                      mode="tta" if metric == "time_to_target" else "throughput",
                      lockstep=plan.lockstep and metric == "step_time", cache=plan.cache or plan.out / "commits")
        log(f"comparison {count[0]}: {base[:12]} -> {head[:12]}, {rounds} rounds, in {out}")
        run_ab(one, base, head, log)
        report = tta.compare([out / "base"], [out / "head"], settings, floors=floors or None)
        d = decision_of(report, workload, metric)
        log(f"comparison {count[0]}: {d.verdict} x{d.ratio if d.ratio is not None else float('nan'):.4f}")
        return d

    return compare

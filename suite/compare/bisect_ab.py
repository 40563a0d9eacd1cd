"""The real comparator of `trainbench bisect`: each comparison is one `trainbench ab` (suite/compare/ab.py: both
commits on this runner, one venv each, lockstep rounds) decided by `compare` at the gate's settings, exactly as the
PR workflow's A/B (scripts/ci/bench_ab.sh) decides. Worktrees and venvs are made once per commit (`ABPlan.cache`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from suite.compare import model as compare_model
from suite.compare import tta
from suite.compare.ab import output_tail, run_ab
from suite.compare.ab_plan import ABError, ABPlan
from suite.compare.bisect import METRICS, NO_CHANGE, NOT_COMPARABLE, SKIPPED, Decision


def decision_of(report: compare_model.Report, workload: str, metric: str) -> Decision:
    """The gate's verdict on one workload: the pair's verdict and the metric's ratio and interval (or p)."""
    pairs = [p for p in report.pairs if p.workload == workload]
    if len(pairs) != 1:
        why = "no comparable pair" if not pairs else f"{len(pairs)} pairs (several hardware or backends)"
        return Decision(NOT_COMPARABLE, note=f"{workload}: {why}")
    p = pairs[0]
    m = p.metric(METRICS[metric])
    verdict = NO_CHANGE if p.verdict == compare_model.SAME else str(p.verdict)
    if m is None:
        return Decision(verdict, note=p.reason)
    return Decision(verdict, m.ratio, m.ci_low, m.ci_high, m.p_value, p.reason or m.note)


def unmeasured(out: Path, side: str) -> str | None:
    """Why one side of an A/B gave nothing to compare (no result, or only `error` ones: a commit that does not
    import, or whose run fails), with the end of its output; None when it measured something."""
    from suite.results.record import load_results

    folder = out / side
    loaded = load_results(folder) if folder.is_dir() else None
    if loaded is not None and any(r.status != "error" for _, r in loaded.results):
        return None
    errors = sorted({(r.error or "").splitlines()[-1][:300] for _, r in loaded.results}) if loaded else []
    logs = sorted((out / "logs").glob(f"{side}-r*.log"))
    tail = output_tail(logs[-1], 600).strip().splitlines()[-3:] if logs else []
    said = "; ".join(errors) or " | ".join(tail) or "no output"
    return f"no run of it ended well ({said})"


def _skipped(sha: str, why: str, log: Callable[[str], None], n: int) -> Decision:
    log(f"comparison {n}: skipped {sha[:12]}, it could not be measured: {why}")
    return Decision(SKIPPED, note=f"{sha[:12]} skipped: {why[-600:]}")


def ab_comparator(plan: ABPlan, workload: str, metric: str, settings: compare_model.Settings, floors: list[Path],
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
        try:
            run_ab(one, base, head, log)
        except ABError as e:
            if e.side != "head":
                raise
            return _skipped(head, str(e), log, count[0])
        for side, sha in (("head", head), ("base", base)):
            why = unmeasured(out, side)
            if why and side == "head":  # as `git bisect skip`: this commit cannot be tested, try a neighbour
                return _skipped(head, why, log, count[0])
            if why:
                return Decision(NOT_COMPARABLE, note=f"base {sha[:12]}: {why}")
        report = tta.compare([out / "base"], [out / "head"], settings, floors=floors or None)
        d = decision_of(report, workload, metric)
        log(f"comparison {count[0]}: {d.verdict} x{d.ratio if d.ratio is not None else float('nan'):.4f}")
        return d

    return compare

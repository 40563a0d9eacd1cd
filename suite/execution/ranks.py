"""Per-rank step times and stragglers: a compact summary of every rank's steps in Result.goodput.ranks, and the
rank that holds the others back named in the result's warnings.

Where ranks meet: after every step all ranks agree on whether to stop (`distributed.all_max`); each rank times its
wait there. The wait ends for all ranks at once (when the last one arrives), so a rank's lateness at a step is the
longest wait of that step minus its own: the rank that arrives last waits least. No clocks are compared across
processes or nodes. A straggler is a rank that is the last to arrive in at least LATEST_SHARE of the steps AND
holds the others back by a median of at least LATE_FRACTION of the median step: relative figures, so a loaded
host (which slows every rank alike and shuffles who comes last) names nobody, while a rank slowed by a third of
its step every step is named. A rank slowed before the step's gradient all-reduce is waited for inside that
collective instead (every rank then reaches the agreement together): under DDP each rank also times its span inside
the all-reduce (suite/backends/parallel/allreduce_timer.py), and the same rule on those spans names it; under FSDP2
(on CPU) its all-gathers and reduce-scatters (suite/backends/parallel/fsdp_comm_timer.py). Not seen: the other
backends' collectives (not timed).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

MIN_STEPS = 20  # fewer steps say nothing about who is usually last
LATEST_SHARE = 0.9  # the last to arrive in at least this share of the steps ...
LATE_FRACTION = 0.35  # ... by a median of at least this share of the median step (a quiet 2-rank CPU run at load 14: rank 0 last in 70% of steps by 16%, gloo's own asymmetry)


# the collectives inside a step whose per-rank spans the backend times (TrainState.extra key, the words, the row
# fields' prefix, whether it names a straggler): DDP's all-reduce (allreduce_timer.py), FSDP2's all-gathers and
# reduce-scatters together, and the reduce-scatters alone (recorded; the rank is named once, by the two together)
MEETINGS = (("allreduce_s", "the last to reach the gradient all-reduce", "allreduce_", True),
            ("fsdp_comm_s", "the last to reach FSDP's all-gathers and reduce-scatters", "fsdp_", True),
            ("fsdp_reduce_scatter_s", "the last to reach FSDP's gradient reduce-scatter", "reduce_scatter_", False))


def _gather(values: list[float], world: int) -> list[list[float]]:
    """Every rank's list (same length on every rank: one entry per step), on every rank."""
    import torch.distributed as dist

    mine = torch.tensor(values, dtype=torch.float64)
    out = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(out, mine)
    return [t.tolist() for t in out]


def summary(step_times: list[list[float]], waits: list[list[float]], where: str = "the last to finish its step",
            prefix: str = "") -> tuple[list[dict[str, Any]], list[str]]:
    """Each rank's step summary and lateness, and the warning naming a straggler (pure: the test feeds it). `where`
    names the meeting point the waits were timed at; `prefix` that point's row fields (late_median_s, latest_share)."""
    world = len(step_times)
    n = min(len(w) for w in waits) if waits else 0
    late = [[0.0] * n for _ in range(world)]
    latest = [0] * world
    for i in range(n):
        step_waits = [waits[r][i] for r in range(world)]
        longest = max(step_waits)
        for r in range(world):
            late[r][i] = longest - step_waits[r]
        latest[min(range(world), key=lambda r: step_waits[r])] += 1
    step_median = statistics.median([t for ts in step_times for t in ts]) if any(step_times) else 0.0
    ranks, warnings = [], []
    for r in range(world):
        ts = sorted(step_times[r])
        row: dict[str, Any] = {"rank": r, "steps": len(ts)}
        if ts:
            row.update(step_p50_s=statistics.median(ts), step_p90_s=ts[min(len(ts) - 1, int(0.9 * len(ts)))],
                       step_mean_s=sum(ts) / len(ts))
        if n:
            row.update({f"{prefix}late_median_s": statistics.median(late[r]), f"{prefix}latest_share": latest[r] / n})
        ranks.append(row)
    if n >= MIN_STEPS and step_median > 0:
        for row in ranks:
            share, held = row[f"{prefix}latest_share"], row[f"{prefix}late_median_s"]
            if share >= LATEST_SHARE and held >= LATE_FRACTION * step_median:
                warnings.append(f"straggler: rank {row['rank']} was {where} in {share:.0%} of "
                                f"{n} steps, holding the others back by a median {held * 1e3:.3g} ms "
                                f"({held / step_median:.0%} of a step)")
    return ranks, warnings


def agree(run: Any, code: int) -> int:
    """The ranks' agreement on the stop code (the most severe), with this rank's wait for it recorded."""
    from suite import distributed

    t = time.perf_counter()
    code = distributed.all_max(code)
    run.agree_wait_s.append(time.perf_counter() - t)
    return code


def gather(run: Any) -> None:
    """On every rank (a collective), after the clock stopped: the summary into run.rank_summary, the warning
    into run.warnings (rank 0's result holds them)."""
    world = run.dist.world
    if world < 2:
        return
    n = min(len(run.step_times), len(run.agree_wait_s))
    all_times = _gather(run.step_times[len(run.step_times) - n:], world)  # this attempt's steps (a restore
    all_waits = _gather(run.agree_wait_s[len(run.agree_wait_s) - n:], world)  # brings back the earlier times)
    run.rank_summary, warnings = summary(all_times, all_waits)
    run.warnings += warnings
    from suite import distributed

    extra = run.train_state.extra if run.train_state is not None else {}
    for key, where, prefix, warn in MEETINGS:
        spans: list[float] = extra.get(key) or []
        m = -distributed.all_max(-min(len(spans), n))  # every rank's spans of the same steps (one a step)
        if m <= 0:
            continue
        rows, more = summary(_gather(run.step_times[len(run.step_times) - m:], world),
                             _gather(spans[len(spans) - m:], world), where, prefix)
        for row, got in zip(run.rank_summary, rows, strict=True):
            row.update({k: v for k, v in got.items() if k.startswith(prefix)})
        if warn:
            run.warnings += more

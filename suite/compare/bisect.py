"""Automatic bisect: the first commit between a good and a bad one that made a workload slower, decided by the A/B
gate (suite/compare/ab.py runs each pair of commits on this runner; compare's verdict decides).

Every tested commit is compared with the GOOD commit, so each verdict answers one question: "is this commit already
slower than good?". A `suspicious` verdict (point estimate beyond the floor, interval not) is repeated with more
rounds before it counts; still undecided, the search stops with the range it narrowed to. When a culprit is found,
it is compared with the BAD commit: if bad is slower still, a second change lies after it (the search goes on in
that range while the budget lasts); if bad is faster, part of the change was undone later. Either way the result
says so, with every comparison as evidence, and never states one culprit as certain when the range was not one
change. The comparisons are done by a `Comparator` (`ab_comparator` runs them for real; the tests and
benchmarks/bisect_cost.py pass a simulated one that feeds the same gate).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REGRESSED, IMPROVED, SUSPICIOUS, NO_CHANGE, NOT_COMPARABLE = (
    "regressed", "improved", "suspicious", "no change", "not comparable")
SKIPPED = "skipped"  # the head commit could not be measured (it does not import, or no run of it ended well)
METRICS = {"step_time": "time_per_step_s", "time_to_target": "time_to_target_s"}
FOUND, MULTIPLE, NON_MONOTONIC, UNDECIDED, NOT_REPRODUCED = (
    "found", "several changes", "non-monotonic", "undecided", "not reproduced")


class BisectError(ValueError):
    """Bad input (a ref that does not resolve, good not an ancestor of bad, an empty range); exit 2."""


@dataclass
class Decision:
    verdict: str  # regressed | improved | no change | suspicious | not comparable (time to target: SAME -> no change)
    ratio: float | None = None  # candidate / base of the metric
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    note: str = ""


Comparator = Callable[[str, str, int], Decision]  # (base sha, head sha, rounds) -> the gate's decision


@dataclass
class Tested:
    base: str
    head: str
    index: int  # of head in the range (0 = good)
    rounds: int
    verdict: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    note: str
    purpose: str  # search | confirm | after the culprit | repeat


@dataclass
class BisectResult:
    workload: str
    metric: str
    good: str
    bad: str
    commits: list[str]
    status: str = UNDECIDED
    culprit: str | None = None  # the first bad commit, when one was found
    culprit_ratio: float | None = None  # culprit vs good, with its interval
    culprit_ci: tuple[float | None, float | None] = (None, None)
    culprits: list[str] = field(default_factory=list)  # every change found, in order (several changes)
    range: tuple[str, str] | None = None  # (last known good, first known bad) where undecided
    skipped: list[str] = field(default_factory=list)  # commits that could not be measured (as `git bisect skip`)
    summary: str = ""
    tested: list[Tested] = field(default_factory=list)

    @property
    def comparisons(self) -> int:
        return len(self.tested)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "trainbench-bisect", "schema_version": 1, **asdict(self), "comparisons": self.comparisons}


def _settle(cmp: Comparator, base: str, head: str, rounds: int, repeats: int, purpose: str, out: BisectResult,
            index: int) -> Decision:
    """One decision; `suspicious` is repeated with twice the rounds each time, up to `repeats` times."""
    d = cmp(base, head, rounds)
    out.tested.append(Tested(base, head, index, rounds, d.verdict, d.ratio, d.ci_low, d.ci_high, d.p_value, d.note,
                             purpose))
    for _ in range(repeats):
        if d.verdict != SUSPICIOUS:
            break
        rounds *= 2
        d = cmp(base, head, rounds)
        out.tested.append(Tested(base, head, index, rounds, d.verdict, d.ratio, d.ci_low, d.ci_high, d.p_value,
                                 d.note, "repeat"))
    return d


def _search(commits: list[str], lo: int, hi: int, hi_known: bool, cmp: Comparator, rounds: int, repeats: int,
            out: BisectResult, budget: int) -> tuple[int | None, int, int]:
    """Binary search in commits[lo+1 .. hi] for the first one `regressed` against commits[lo]. Returns
    (culprit index or None, the final lo, hi)."""
    base = commits[lo]

    def untested() -> list[int]:  # the commits strictly between lo and hi that can still be measured
        return [i for i in range(lo + 1, hi) if commits[i] not in out.skipped]

    while untested() and out.comparisons < budget:
        # the middle one; a skipped commit's nearest measurable neighbour instead (as `git bisect skip`)
        mid = min(untested(), key=lambda i: (abs(2 * i - lo - hi), i))
        d = _settle(cmp, base, commits[mid], rounds, repeats, "search", out, mid)
        if d.verdict == SKIPPED:
            out.skipped.append(commits[mid])
        elif d.verdict == REGRESSED:
            hi, hi_known = mid, True
        elif d.verdict in (NO_CHANGE, IMPROVED):
            lo = mid
        else:  # still suspicious, or not comparable: no honest way to go left or right
            return None, lo, hi
    if untested():
        return None, lo, hi
    if not hi_known:  # hi is the bad commit itself, never tested against this base: test it now
        d = _settle(cmp, base, commits[hi], rounds, repeats, "confirm", out, hi)
        if d.verdict == SKIPPED:
            out.skipped.append(commits[hi])
        if d.verdict != REGRESSED:
            return None, lo, hi
    if hi - lo > 1:  # only skipped commits left before hi: any of them, or hi, is the first bad one
        return None, lo, hi
    return hi, lo, hi


def bisect(workload: str, metric: str, commits: list[str], cmp: Comparator, rounds: int = 10, repeats: int = 1,
           budget: int = 12) -> BisectResult:
    """commits[0] is good, commits[-1] bad (first-parent order, oldest first). A commit the comparator cannot
    measure (SKIPPED) is left out as `git bisect skip` leaves it, and every result names the skipped ones."""
    if len(commits) < 2:
        raise BisectError("the range needs a good and a bad commit")
    out = BisectResult(workload, metric, commits[0], commits[-1], commits)
    _bisect(out, commits, cmp, rounds, repeats, budget)
    if out.skipped and "skipped (could not be measured)" not in out.summary:
        out.summary += f"; skipped (could not be measured): {', '.join(c[:12] for c in out.skipped)}"
    return out


def _bisect(out: BisectResult, commits: list[str], cmp: Comparator, rounds: int, repeats: int,
            budget: int) -> BisectResult:
    culprit, lo, hi = _search(commits, 0, len(commits) - 1, False, cmp, rounds, repeats, out, budget)
    if culprit is None:
        last = out.tested[-1] if out.tested else None
        if last is not None and last.purpose in ("confirm", "repeat") and last.head == commits[-1] \
                and last.verdict in (NO_CHANGE, IMPROVED):
            out.status = NOT_REPRODUCED
            out.summary = (f"{commits[-1][:12]} is not slower than {commits[0][:12]} here ({last.verdict}, "
                           f"x{last.ratio or float('nan'):.4f}): the change does not reproduce on this runner")
            return out
        out.status, out.range = UNDECIDED, (commits[lo], commits[hi])
        why = f"{last.verdict}: {last.note}" if last else "no comparison"
        out.summary = (f"undecided: the first bad commit lies in ({commits[lo][:12]}, {commits[hi][:12]}] "
                       f"({hi - lo} commit(s)); the last comparison was {why}")
        left = [c for c in commits[lo + 1 : hi] if c in out.skipped]
        if left and last is not None and last.verdict == REGRESSED and last.head == commits[hi]:
            out.summary = (f"undecided: only skipped commits are left to test; the first bad commit could be any of "
                           f"{', '.join(c[:12] for c in [*left, commits[hi]])}")
        return out
    first = next(t for t in reversed(out.tested) if t.head == commits[culprit] and t.base == commits[0])
    out.culprit, out.culprit_ratio, out.culprit_ci = commits[culprit], first.ratio, (first.ci_low, first.ci_high)
    out.culprits = [commits[culprit]]
    if culprit == len(commits) - 1:
        out.status = FOUND
        out.summary = _found_text(out)
        return out
    after = _settle(cmp, commits[culprit], commits[-1], rounds, repeats, "after the culprit", out, len(commits) - 1)
    if after.verdict == NO_CHANGE:
        out.status = FOUND
        out.summary = _found_text(out) + f"; the bad commit is no slower than it (x{after.ratio or float('nan'):.4f})"
    elif after.verdict == SKIPPED:  # the bad commit itself could not be measured this time: what was found stands
        out.status, out.skipped = FOUND, [*out.skipped, commits[-1]]
        out.summary = _found_text(out) + f"; the bad commit could not be compared with it ({after.note})"
    elif after.verdict == REGRESSED:
        out.status = MULTIPLE
        second, _, _ = _search(commits, culprit, len(commits) - 1, True, cmp, rounds, repeats, out, budget)
        if second is not None:
            out.culprits.append(commits[second])
        where = (f"{commits[second][:12]}" if second is not None else
                 f"somewhere in ({commits[culprit][:12]}, {commits[-1][:12]}] (budget or noise stopped the search)")
        out.summary = (f"more than one change: {commits[culprit][:12]} made it slower (x{out.culprit_ratio:.4f} vs "
                       f"good), and the bad commit is slower still than it (x{after.ratio:.4f}): a second change, "
                       f"{where}")
    else:
        out.status = NON_MONOTONIC
        out.summary = (f"non-monotonic: {commits[culprit][:12]} is the first commit slower than good "
                       f"(x{out.culprit_ratio:.4f}), but the bad commit compared with it is {after.verdict} "
                       f"(x{after.ratio or float('nan'):.4f}): a later commit undid part of it, or the runner is "
                       "noisy; read the evidence before blaming one commit")
    return out


def _found_text(out: BisectResult) -> str:
    lo, hi = out.culprit_ci
    iv = f" [{lo:.4f}, {hi:.4f}]" if lo is not None and hi is not None else ""
    return (f"first bad commit {out.culprit[:12]}: x{out.culprit_ratio:.4f}{iv} against good "  # type: ignore[index]
            f"{out.good[:12]}, in {out.comparisons} comparison(s)")


def to_markdown(r: BisectResult) -> str:
    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.4f}"

    lines = [f"### TrainBench bisect: `{r.workload}` ({r.metric})", "",
             f"**{r.status}** — {r.summary}", "",
             f"range: {r.good[:12]} (good) .. {r.bad[:12]} (bad), {len(r.commits) - 1} commit(s); "
             f"{r.comparisons} comparison(s)", "",
             "| # | base | head | purpose | rounds | verdict | ratio | interval / p |", "|---|---|---|---|---|---|---|---|"]
    for i, t in enumerate(r.tested, 1):
        iv = f"[{num(t.ci_low)}, {num(t.ci_high)}]" if t.ci_low is not None else (
            f"p {t.p_value:.3g}" if t.p_value is not None else "")
        mark = " ⚑" if t.head in r.culprits and t.base == r.good else ""
        lines.append(f"| {i} | {t.base[:12]} | {t.head[:12]}{mark} | {t.purpose} | {t.rounds} | {t.verdict} | "
                     f"{num(t.ratio)} | {iv} |")
    return "\n".join(lines) + "\n"


def commit_range(repo: Path, good: str, bad: str) -> list[str]:
    """[good, ..., bad] along bad's first parents; BisectError if good is not an ancestor of bad."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise BisectError(f"git {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip()

    shas = []
    for flag, ref in (("--good", good), ("--bad", bad)):
        try:
            shas.append(git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"))
        except BisectError:
            raise BisectError(f"{flag} {ref!r}: not a commit in {repo}") from None
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", *shas]).returncode != 0:
        raise BisectError(f"--good {good} is not an ancestor of --bad {bad}: give the older commit as --good")
    between = git("rev-list", "--first-parent", "--reverse", f"{shas[0]}..{shas[1]}").split()
    if not between:
        raise BisectError(f"--good and --bad are the same commit ({shas[0][:12]}): nothing to bisect")
    return [shas[0], *between]

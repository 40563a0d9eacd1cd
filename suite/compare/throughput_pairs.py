"""Throughput A/B pairs: per (hardware, workload, backend), the ratio of median step times and its interval
(suite/compare/ab_verdict.py decides), each a PairReport beside compare's time-to-target pairs."""

from __future__ import annotations

from suite.compare import ab_verdict as compare_ab
from suite.compare.ab_verdict import CompareInputError
from suite.compare.model import NOT_COMPARABLE, MetricResult, PairReport, Settings, SideInfo, Summary
from suite.results import key as compare_key
from suite.results import stats
from suite.results.noise_floor import NoiseFloor
from suite.results.runfiles import Loaded, SideKey


def ignored_floor_note(cand_floor: float | None, used: float) -> str:
    """The note when the candidate brought a noise floor of its own: the baseline's is the one used."""
    if cand_floor is None or cand_floor == used:
        return ""
    return (f"the candidate's own noise floor {cand_floor:g} was ignored: the baseline's ({used:g}) wins, so a change "
            "cannot widen the floor it is judged by")


def compare_throughput(base: Loaded, cand: Loaded, s: Settings) -> list[PairReport]:
    """Throughput A/B: per (hardware, workload, backend), the ratio of median step times and its interval."""
    bg = compare_ab.groups(base, "baseline", s.min_steps)
    cg = compare_ab.groups(cand, "candidate", s.min_steps)
    b_failed, c_failed = compare_ab.failed(base), compare_ab.failed(cand)
    pairs: list[PairReport] = []
    for key in sorted(set(bg) | set(cg) | set(b_failed) | set(c_failed),
                      key=lambda k: (k.workload, k.backend, k.hardware)):
        b, c = bg.get(key), cg.get(key)
        info = [SideInfo(next(iter(g.spec_hashes), None) if g else None, None, len(g.records) if g else 0,
                         len(g.records) if g else 0) for g in (b, c)]
        for i, fails in enumerate((b_failed.get(key, []), c_failed.get(key, []))):
            info[i].runs += len(fails)
        pair = PairReport(key.hardware, key.workload, key.backend, NOT_COMPARABLE, info[0], info[1],
                          s.throughput_noise_floor, "default", mode="throughput")
        pairs.append(pair)
        fails = [f"{side}: {len(x)} run(s) ended {', '.join(sorted({r.figures.status for r in x}))} "
                 f"(e.g. {x[0].source})" for side, x in (("baseline", b_failed.get(key)), ("candidate", c_failed.get(key)))
                 if x]
        if fails:
            pair.reason = "failed throughput runs: " + "; ".join(fails)
            continue
        if b is None or c is None:
            pair.reason = f"no {'baseline' if b is None else 'candidate'} throughput runs for this workload"
            continue
        if b.spec_hashes != c.spec_hashes or len(b.spec_hashes) > 1:
            pair.reason = (f"different spec hash: baseline {', '.join(sorted(b.spec_hashes))}, candidate "
                           f"{', '.join(sorted(c.spec_hashes))}; the workload spec changed between the commits")
            continue
        if diff := compare_key.differences(b.records[0].comparison, c.records[0].comparison):
            raise CompareInputError(f"{key.workload} on {key.hardware}: the two sides ran different configurations "
                                    f"({'; '.join(diff)}); an A/B must run the same command on both sides")
        if min(len(b.steps), len(c.steps)) < s.min_runs:
            pair.reason = (f"too few runs: baseline {len(b.steps)}, candidate {len(c.steps)}; at least {s.min_runs} "
                           "each are needed (`trainbench ab --rounds N`)")
            continue
        _floor_for(pair, b, c, base.floors, s)
        iv = compare_ab.ratio_interval(b.steps, c.steps, s.alpha, s.n_boot, paired=compare_ab.paired(b, c))
        verdict, note = compare_ab.verdict(iv, pair.noise_floor)
        pair.verdict = verdict  # type: ignore[assignment]
        pair.metrics = [_step_metric(b.steps, c.steps, iv, verdict, note, s)]
    pairs.sort(key=lambda p: (p.severity, p.workload, p.backend, p.hardware))
    return pairs


def _floor_for(pair: PairReport, b: compare_ab.ABGroup, c: compare_ab.ABGroup, floors: list[NoiseFloor],
               s: Settings) -> None:
    """The measured A/A floor for this runner, else the baseline's spec floor, else the default: never the
    candidate's own."""
    key = SideKey(pair.hardware, pair.workload, pair.backend)
    measured, note = compare_ab.measured_floor(floors, key, b.records[0].comparison)
    spec_floor = b.records[0].noise_floor
    if measured is not None:
        pair.noise_floor, pair.noise_floor_source = measured.noise_floor, "measured"
    elif spec_floor is not None:
        pair.noise_floor, pair.noise_floor_source = spec_floor, "spec"
    pair.floor_note = "; ".join(x for x in (note, ignored_floor_note(c.records[0].noise_floor, pair.noise_floor)) if x)


def _step_metric(base: list[list[float]], cand: list[list[float]], iv: compare_ab.Interval, verdict: str, note: str,
                 s: Settings) -> MetricResult:
    def summary(runs: list[list[float]], med: float) -> Summary:
        per_run = [stats.median(r) for r in runs]
        return Summary(sum(map(len, runs)), med, med, min(per_run), max(per_run))

    return MetricResult("time_per_step_s", "time per step", "s", True, True, verdict,  # type: ignore[arg-type]
                        summary(base, iv.base_median_s), summary(cand, iv.head_median_s), iv.ratio, note=note,
                        ci_low=iv.ci_low, ci_high=iv.ci_high)

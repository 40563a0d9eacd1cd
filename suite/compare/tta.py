"""Candidate vs baseline: per (hardware, workload, backend) statistics, verdicts, attribution, Markdown/JSON, exit codes.

The test is the exact two-sided Mann-Whitney U on the per-seed figures (suite/results/stats.py says why), with the
noise floor as its margin: a metric is `regressed` or `improved` only when the candidate, moved towards the
baseline by the floor, still differs significantly at alpha. Throughput results (A/B of two commits) take the
other road: suite/compare/ab_verdict.py's interval of the ratio of median step times. The data model is in
suite/compare/model.py, the JSON and Markdown in suite/compare/output.py; the throughput pairs in
suite/compare/throughput_pairs.py.
docs/compare.md is the user's description.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from suite.compare import ab_verdict as compare_ab
from suite.compare import rcp_guard
from suite.compare.ab_verdict import CompareInputError
from suite.compare.model import (
    IMPROVED,
    METRICS,
    NOT_COMPARABLE,
    PHASE_METRICS,
    REGRESSED,
    SAME,
    Metric,
    MetricResult,
    PairReport,
    Report,
    Settings,
    SideInfo,
    Summary,
)
from suite.compare.output import fmt
from suite.compare.throughput_pairs import compare_throughput, ignored_floor_note
from suite.results import key as compare_key
from suite.results import stats
from suite.results.baselines import load_paths
from suite.results.noise_floor import FloorError, NoiseFloor, check_floor
from suite.results.rcp import RCP
from suite.results.rcp import newest as newest_rcps
from suite.results.runfiles import Loaded, Side, SideKey, sides
from suite.results.stats import RunFigures

# ---- one metric --------------------------------------------------------------------------------------------


def _summary(values: Sequence[float], center: str) -> Summary:
    lo, hi = stats.spread(values)
    c = stats.olympic_mean(values) if center == "olympic" else stats.median(values)
    return Summary(len(values), c, stats.median(values), lo, hi)


def _ratio(cand: float, base: float) -> float | None:
    if math.isinf(cand) and math.isinf(base):
        return None
    if math.isinf(cand):
        return math.inf
    if base == 0 or math.isnan(base) or math.isnan(cand):
        return None
    return cand / base  # base inf -> 0.0


def too_few_seeds(n_base: int, n_cand: int, s: Settings) -> str | None:
    if min(n_base, n_cand) < s.min_seeds:
        return f"too few seeds: baseline {n_base}, candidate {n_cand}; at least {s.min_seeds} each are needed"
    floor_p = stats.min_attainable_p(n_cand, n_base)
    if floor_p > s.alpha:
        return (
            f"too few seeds: with {n_base} baseline and {n_cand} candidate runs the smallest possible p-value is "
            f"{floor_p:.3f} > alpha {s.alpha}, so no change could ever be detected (use e.g. 5 seeds each)"
        )
    return None


def compare_metric(
    metric: Metric, base_runs: Sequence[RunFigures], cand_runs: Sequence[RunFigures], floor: float, s: Settings,
) -> MetricResult:
    out = MetricResult(metric.name, metric.label, metric.unit, metric.lower_is_better, metric.name in s.gate, NOT_COMPARABLE)
    base = [v for v in map(metric.get, base_runs) if v is not None and not math.isnan(v)]
    cand = [v for v in map(metric.get, cand_runs) if v is not None and not math.isnan(v)]
    if base:
        out.baseline = _summary(base, metric.center)
    if cand:
        out.candidate = _summary(cand, metric.center)
    if not base or not cand:
        missing = " and ".join(w for w, xs in (("baseline", base), ("candidate", cand)) if not xs)
        out.note = f"not measured on the {missing} side"
        return out
    if (few := too_few_seeds(len(base), len(cand), s)) is not None:
        out.note = few
        return out
    if not any(v != math.inf for v in base) and not any(v != math.inf for v in cand):
        out.note = "no run reached the target on either side"
        return out
    assert out.baseline and out.candidate
    out.ratio = _ratio(out.candidate.center, out.baseline.center)
    test = stats.mann_whitney_u(cand, base)
    out.p_any_change, out.exact = test.p_value, test.exact
    half = len(cand) * len(base) / 2
    cand_larger = test.u > half
    worse_by_ranks = cand_larger == metric.lower_is_better
    # The verdict's test has the noise floor as its margin: move the candidate's runs by the floor towards the
    # baseline and test again. Significant only if the candidate still differs in the same direction, so a
    # true change no larger than the floor is called a change with probability at most alpha / 2.
    k = 1 + floor
    moved = [v / k for v in cand] if cand_larger else [v * k for v in cand]
    margin = stats.mann_whitney_u(moved, base) if test.u != half else test
    same_side = test.u != half and (margin.u > half) == cand_larger and margin.u != half
    out.p_value = margin.p_value if same_side else 1.0
    if out.ratio is None:  # both aggregates infinite: the ranks (how many failed, how fast the rest) decide
        out.note = "ratio undefined: both aggregates are infinite (too many runs did not reach the target)"
        out.verdict = (REGRESSED if worse_by_ranks else IMPROVED) if out.p_value <= s.alpha else SAME
        return out
    if out.p_value > s.alpha:
        out.verdict = SAME
        if out.p_any_change <= s.alpha:
            out.note = f"a change is significant (p {out.p_any_change:.3g}), one beyond the {floor:.0%} noise floor is not"
    elif abs(out.badness) <= math.log1p(floor):
        out.verdict, out.note = SAME, f"within the {floor:.0%} noise floor"
    elif (out.badness > 0) != worse_by_ranks:
        out.verdict, out.note = SAME, "the ranks and the aggregate disagree on the direction"
    else:
        out.verdict = REGRESSED if out.badness > 0 else IMPROVED
    return out


# ---- attribution: TTA = steps to target x time per step ---------------------------------------------------


def attribute(pair: PairReport) -> None:
    tta, steps, tps = (pair.metric(n) for n in ("time_to_target_s", "steps_to_target", "time_per_step_s"))
    if tta is None or tta.verdict not in (REGRESSED, IMPROVED):
        return
    direction = tta.verdict

    def factor(m: MetricResult | None) -> str:
        if m is None or m.baseline is None or m.candidate is None:
            return "unknown"
        r = _ratio(m.candidate.median, m.baseline.median)
        return "undefined" if r is None else f"x{r:.3g}"

    fell = (pair.candidate.success_rate or 0) < (pair.baseline.success_rate or 0)
    conv = (steps is not None and steps.verdict == direction) or (direction == REGRESSED and fell)
    thr = tps is not None and tps.verdict == direction
    pair.cause = {(True, True): "both", (True, False): "convergence", (False, True): "throughput"}.get(
        (conv, thr), "neither factor alone (evaluation time, overhead, or changes below the test's power)"
    )
    parts = [f"steps to target {factor(steps)} ({steps.verdict if steps else 'n/a'})",
             f"time per step {factor(tps)} ({tps.verdict if tps else 'n/a'})"]
    if pair.candidate.success_rate != pair.baseline.success_rate:
        parts.append(f"success rate {pair.baseline.success_rate:.0%} -> {pair.candidate.success_rate:.0%}")
    pair.cause_detail = "; ".join(parts)


def attribute_phase(pair: PairReport) -> None:
    """RL post-training: name the part of the step that changed, rollout (generation) or training, by the phase
    metrics' own verdicts (a regression first: it is what the reader must act on)."""
    for verdict in (REGRESSED, IMPROVED):
        parts = [part for name, part in PHASE_METRICS.items()
                 if (m := pair.metric(name)) is not None and m.verdict == verdict]
        if parts:
            pair.phase = f"{'both' if len(parts) == 2 else parts[0]} {'regression' if verdict == REGRESSED else 'improvement'}"
            return


# ---- pairing ----------------------------------------------------------------------------------------------


def _info(side: Side | None, spec_hash: str | None) -> SideInfo:
    if side is None or spec_hash is None or spec_hash not in side.by_spec:
        return SideInfo(spec_hash, None, 0, 0)
    runs = side.by_spec[spec_hash]
    return SideInfo(spec_hash, side.workload_version.get(spec_hash), len(runs), sum(r.reached for r in runs))


def _tta_looks_worse(pair: PairReport) -> bool:
    tta = pair.metric("time_to_target_s")
    return tta is not None and tta.badness > math.log1p(pair.noise_floor)


def apply_rcp(pair: PairReport, spec_hash: str, b_runs: Sequence[RunFigures], c_runs: Sequence[RunFigures],
              cand: Side, rcps: dict[tuple[str, str], RCP], s: Settings) -> None:
    """The convergence guard: the RCP verdict, and a candidate faster than the reference mean judged on its time
    to target normalized as MLPerf does (x reference mean / candidate mean), the raw figure kept beside it."""
    found = rcp_guard.guard(pair.workload, spec_hash, c_runs, cand.sources, rcps)
    if isinstance(found, str):
        pair.rcp_note = found
        return
    if found is None:
        return
    pair.rcp = dict(found.__dict__)
    if found.norm_factor <= 1 or not pair.metrics:
        return
    scaled = [r.model_copy(update={"time_to_target_s": r.time_to_target_s * found.norm_factor})
              if r.time_to_target_s is not None else r for r in c_runs]
    i = next(i for i, m in enumerate(pair.metrics) if m.name == "time_to_target_s")
    m = compare_metric(METRICS[i], b_runs, scaled, pair.noise_floor, s)
    raw = pair.metrics[i].candidate
    m.note = "; ".join(x for x in (f"candidate normalized x{found.norm_factor:.4f} by its RCP (raw center "
                                   f"{fmt(raw.center if raw else None, 's')})", m.note) if x)
    pair.metrics[i] = m


def _compare_pair(key: SideKey, base: Side, cand: Side, spec_hash: str, s: Settings,
                  rcps: dict[tuple[str, str], RCP] | None = None) -> PairReport:
    floor = base.noise_floor.get(spec_hash)  # the baseline's floor wins: a PR cannot widen its own margin
    source: Literal["measured", "spec", "default"] = "spec" if floor is not None else "default"
    pair = PairReport(
        key.hardware, key.workload, key.backend, SAME, _info(base, spec_hash), _info(cand, spec_hash),
        floor if floor is not None else s.default_noise_floor, source,
    )
    pair.floor_note = ignored_floor_note(cand.noise_floor.get(spec_hash), pair.noise_floor)
    b_runs, c_runs = base.by_spec[spec_hash], cand.by_spec[spec_hash]
    pair.warnings = host_load_warnings(b_runs, c_runs)
    if reason := _key_mismatch(base.comparison.get(spec_hash, []), cand.comparison.get(spec_hash, [])):
        b_runs, c_runs = [], []
        pair.verdict, pair.reason = NOT_COMPARABLE, reason
        for m in METRICS:
            r = compare_metric(m, base.by_spec[spec_hash], cand.by_spec[spec_hash], pair.noise_floor, s)
            r.verdict, r.ratio, r.p_value, r.p_any_change, r.note = NOT_COMPARABLE, None, None, None, reason
            pair.metrics.append(r)
        return pair
    pair.metrics = [compare_metric(m, b_runs, c_runs, pair.noise_floor, s) for m in METRICS]
    if rcps:
        apply_rcp(pair, spec_hash, b_runs, c_runs, cand, rcps, s)
    if (few := too_few_seeds(len(b_runs), len(c_runs), s)) is not None:
        pair.verdict, pair.reason = NOT_COMPARABLE, few
        return pair
    gating = [m for m in pair.metrics if m.gating]
    if any(m.verdict == REGRESSED for m in gating):
        pair.verdict = REGRESSED
    elif any(m.verdict == IMPROVED for m in gating) and not _tta_looks_worse(pair):
        pair.verdict = IMPROVED  # good news only when time to target did not get worse, significant or not
    attribute(pair)
    attribute_phase(pair)
    pair.warnings += goodput_changes(pair)
    return pair


def goodput_changes(pair: PairReport) -> list[str]:
    """A line naming each wall-clock part whose change the test calls significant (gating or not)."""
    out = []
    for m in pair.metrics:
        if m.name.startswith("goodput") and m.verdict in (REGRESSED, IMPROVED) and m.ratio is not None:
            out.append(f"{m.label} {m.verdict}: x{m.ratio:.3g} (median {m.baseline.center if m.baseline else 0:.3g}"
                       f" -> {m.candidate.center if m.candidate else 0:.3g}{' s' if m.unit else ''}, "
                       f"p {m.p_value:.3g}){'' if m.gating else ' (not gating)'}")
    return out


def host_load_warnings(b_runs: Sequence[RunFigures], c_runs: Sequence[RunFigures]) -> list[str]:
    """One line per side whose runs were made on a loaded host (their timings may be slowed by other work), and
    one per side whose runs were paused inside their timed run (their times to target hold the pause)."""
    out = []
    for side, runs in (("baseline", b_runs), ("candidate", c_runs)):
        loaded = [r for r in runs if r.host_load]
        if loaded:
            out.append(f"{side}: {len(loaded)} of {len(runs)} run(s) on a busy host ({loaded[0].host_load})")
    for side, runs in (("baseline", b_runs), ("candidate", c_runs)):
        paused = [(r.seed, r.paused) for r in runs if r.paused]
        if paused:
            seed, text = paused[0]
            out.append(f"{side}: {len(paused)} of {len(runs)} run(s) paused inside the timed run, seed {seed}: "
                       f"{str(text).removeprefix('paused: ')}")
    return out


def _key_mismatch(base_keys: list[dict[str, Any]], cand_keys: list[dict[str, Any]]) -> str:
    """Why two sides of one spec hash are still not comparable (suite/results/key.py), or ''."""
    for side, keys in (("baseline", base_keys), ("candidate", cand_keys)):
        if mixed := compare_key.mixed(keys):
            return f"the {side} runs mix configurations: {'; '.join(mixed)}"
    if base_keys and cand_keys and (diff := compare_key.differences(base_keys[0], cand_keys[0])):
        return f"different configuration: {'; '.join(diff)}"
    return ""


def _unpaired(key: SideKey, base: Side | None, cand: Side | None, spec: str | None, reason: str, s: Settings) -> PairReport:
    pair = PairReport(
        key.hardware, key.workload, key.backend, NOT_COMPARABLE, _info(base, spec if base else None),
        _info(cand, spec if cand else None), s.default_noise_floor, "default", reason=reason,
    )
    if spec is not None:  # show the figures that exist, without verdicts
        b_runs = base.by_spec.get(spec, []) if base else []
        c_runs = cand.by_spec.get(spec, []) if cand else []
        for m in METRICS:
            r = compare_metric(m, b_runs, c_runs, s.default_noise_floor, s)
            r.verdict, r.ratio, r.p_value, r.p_any_change, r.note = NOT_COMPARABLE, None, None, None, reason
            pair.metrics.append(r)
    return pair


def _short(h: str, side: Side) -> str:
    v = side.workload_version.get(h)
    return f"{h}" + (f" (workload version {v})" if v is not None else "")


def compare_sides(base: dict[SideKey, Side], cand: dict[SideKey, Side], s: Settings,
                  rcps: dict[tuple[str, str], RCP] | None = None) -> list[PairReport]:
    pairs: list[PairReport] = []
    hardware_of: dict[tuple[str, str], list[str]] = {}
    for k in base:
        hardware_of.setdefault((k.workload, k.backend), []).append(k.hardware)
    for key in sorted(set(base) | set(cand), key=lambda k: (k.workload, k.backend, k.hardware)):
        b, c = base.get(key), cand.get(key)
        if b is None:
            elsewhere = sorted(hardware_of.get((key.workload, key.backend), []))
            why = (f"no baseline on this hardware (baselines exist for: {', '.join(elsewhere)}); runs on different "
                   "hardware are never compared" if elsewhere else
                   "no baseline for this workload and backend: promote one (`trainbench baseline promote`)")
            for h in sorted(c.by_spec):  # type: ignore[union-attr]
                pairs.append(_unpaired(key, None, c, h, why, s))
            continue
        if c is None:
            for h in sorted(b.by_spec):
                pairs.append(_unpaired(key, b, None, h, "missing pair: no candidate runs", s))
            continue
        matched = sorted(set(b.by_spec) & set(c.by_spec))
        for h in matched:
            pairs.append(_compare_pair(key, b, c, h, s, rcps))
        for h in sorted(set(c.by_spec) - set(b.by_spec)):
            have = ", ".join(_short(x, b) for x in sorted(b.by_spec))
            pairs.append(_unpaired(
                key, None, c, h,
                f"different spec hash: candidate {_short(h, c)}, baseline {have}. The workload spec changed, so "
                "old and new runs measure different things: promote a new baseline once this change lands", s,
            ))
        if not matched:
            continue
        for h in sorted(set(b.by_spec) - set(c.by_spec)):
            pairs.append(_unpaired(key, b, None, h, f"baseline spec hash {_short(h, b)} has no candidate runs", s))
    pairs.sort(key=lambda p: (p.severity, p.workload, p.backend, p.hardware))
    return pairs


def compare(
    baseline: Iterable[Path], candidate: Iterable[Path], settings: Settings | None = None,
    strict: bool = False, validate: bool = False, floors: Iterable[Path] | None = None,
) -> Report:
    """Read both sides (result and/or baseline files) and compare; ResultError only for a missing path or
    under strict for a bad file."""
    s = settings or Settings()
    b: Loaded = load_paths(baseline, strict, validate)
    c: Loaded = load_paths(candidate, strict, validate)
    extra: list[NoiseFloor] = []
    for root in floors or ():
        extra += load_paths([root], strict=True).floors
    b.floors += extra
    check_floors(b, c)
    parts, left_out = compare_ab.split_modes(b, c)
    pairs: list[PairReport] = []
    for mode, (bm, cm) in parts.items():
        pairs += (compare_throughput(bm, cm, s) if mode == "throughput"
                  else compare_sides(sides(bm), sides(cm), s, newest_rcps(b.rcps)))
    pairs.sort(key=lambda p: (p.severity, p.workload, p.backend, p.hardware))
    return Report(s, pairs, b.errors + c.errors, b.files, c.files, left_out)


def check_floors(*loaded: Loaded) -> None:
    """Any noise floor outside [0, 1), from a result, a baseline or a floor file, is bad input (named)."""
    try:
        for side in loaded:
            for rec in side.records:
                check_floor(rec.noise_floor, f"{rec.source}: config.spec.compare.noise_floor")
            for src, bl in side.baselines:
                check_floor(bl.noise_floor, f"{src}: noise_floor")
    except FloorError as e:
        raise CompareInputError(str(e)) from None

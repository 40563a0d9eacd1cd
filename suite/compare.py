"""Candidate vs baseline: per (hardware, workload, backend) statistics, verdicts, attribution, Markdown/JSON, exit codes.

The test is the exact two-sided Mann-Whitney U on the per-seed figures (suite/stats.py says why), with the
noise floor as its margin: a metric is `regressed` or `improved` only when the candidate, moved towards the
baseline by the floor, still differs significantly at alpha. docs/compare.md is the user's description.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from suite import stats
from suite.baselines import Loaded, RunFigures, Side, SideKey, load_paths, sides

REPORT_SCHEMA_VERSION = 1
DEFAULT_ALPHA = 0.05
DEFAULT_NOISE_FLOOR = 0.05
DEFAULT_MIN_SEEDS = 3
DEFAULT_GATE = ("time_to_target_s", "time_per_step_s", "peak_memory_bytes")
EXIT_OK, EXIT_REGRESSION, EXIT_ERROR = 0, 1, 2

Verdict = Literal["regressed", "improved", "no significant change", "not comparable"]
REGRESSED: Final = "regressed"
IMPROVED: Final = "improved"
SAME: Final = "no significant change"
NOT_COMPARABLE: Final = "not comparable"
# regressions first, then what a human must look at, then good news, then nothing
SEVERITY = {REGRESSED: 0, NOT_COMPARABLE: 1, IMPROVED: 2, SAME: 3}


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str
    lower_is_better: bool
    center: Literal["olympic", "median"]
    get: Callable[[RunFigures], float | None]


METRICS: tuple[Metric, ...] = (
    Metric("time_to_target_s", "time to target", "s", True, "olympic", lambda f: f.tta()),
    Metric("steps_to_target", "steps to target", "steps", True, "median", lambda f: f.steps()),
    Metric("time_per_step_s", "time per step", "s", True, "median", lambda f: f.time_per_step_s),
    Metric("samples_per_s", "throughput", "samples/s", False, "median", lambda f: f.samples_per_s),
    Metric("mfu", "MFU", "", False, "median", lambda f: f.mfu),
    Metric("peak_memory_bytes", "peak memory", "bytes", True, "median", lambda f: f.peak_memory_bytes),
    Metric("energy_j", "energy", "J", True, "median", lambda f: f.energy_j),
)
METRIC_NAMES = tuple(m.name for m in METRICS)


@dataclass(frozen=True)
class Settings:
    alpha: float = DEFAULT_ALPHA
    default_noise_floor: float = DEFAULT_NOISE_FLOOR
    min_seeds: int = DEFAULT_MIN_SEEDS
    gate: tuple[str, ...] = DEFAULT_GATE
    test: str = (
        "exact two-sided Mann-Whitney U with the noise floor as margin (normal approximation above 60 pooled runs)"
    )

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha {self.alpha}: must be between 0 and 1")
        if not 0 <= self.default_noise_floor < 1:
            raise ValueError(f"noise floor {self.default_noise_floor}: must be in [0, 1)")
        unknown = sorted(set(self.gate) - set(METRIC_NAMES))
        if unknown:
            raise ValueError(f"gate metric(s) {unknown}: expected some of {', '.join(METRIC_NAMES)}")


@dataclass
class Summary:
    """One side's figures of one metric."""

    n: int
    center: float  # olympic mean for time to target, median otherwise; inf = too many runs did not reach it
    median: float
    min: float
    max: float


@dataclass
class MetricResult:
    name: str
    label: str
    unit: str
    lower_is_better: bool
    gating: bool
    verdict: Verdict
    baseline: Summary | None = None
    candidate: Summary | None = None
    ratio: float | None = None  # candidate center / baseline center; inf, or None when undefined
    p_value: float | None = None  # of the change beyond the noise floor: the verdict's test
    p_any_change: float | None = None  # of any change at all (the plain test)
    exact: bool | None = None
    note: str = ""

    @property
    def badness(self) -> float:
        """log of the ratio, signed so that > 0 is worse: the severity of a regression."""
        if self.ratio is None or math.isnan(self.ratio):
            return 0.0
        if self.ratio == 0:
            return -math.inf if self.lower_is_better else math.inf
        b = math.log(self.ratio) if not math.isinf(self.ratio) else math.inf
        return b if self.lower_is_better else -b


@dataclass
class SideInfo:
    spec_hash: str | None
    workload_version: int | None
    runs: int
    reached: int

    @property
    def success_rate(self) -> float | None:
        return self.reached / self.runs if self.runs else None


@dataclass
class PairReport:
    hardware: str
    workload: str
    backend: str
    verdict: Verdict
    baseline: SideInfo
    candidate: SideInfo
    noise_floor: float
    noise_floor_source: Literal["spec", "default"]
    reason: str = ""  # why not comparable
    cause: str | None = None  # for a time-to-target change: convergence | throughput | both | ...
    cause_detail: str = ""
    metrics: list[MetricResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. a run made on a loaded host

    def metric(self, name: str) -> MetricResult | None:
        return next((m for m in self.metrics if m.name == name), None)

    @property
    def severity(self) -> tuple[int, float]:
        worst = max((m.badness for m in self.metrics if m.gating and m.verdict == REGRESSED), default=0.0)
        return SEVERITY[self.verdict], -worst


@dataclass
class Report:
    settings: Settings
    pairs: list[PairReport]
    errors: list[str]  # bad files, named and skipped
    baseline_files: int
    candidate_files: int

    @property
    def counts(self) -> dict[str, int]:
        return {v: sum(p.verdict == v for p in self.pairs) for v in SEVERITY}

    @property
    def exit_code(self) -> int:
        if not any(p.verdict != NOT_COMPARABLE for p in self.pairs):
            return EXIT_ERROR
        return EXIT_REGRESSION if any(p.verdict == REGRESSED for p in self.pairs) else EXIT_OK


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


# ---- pairing ----------------------------------------------------------------------------------------------


def _info(side: Side | None, spec_hash: str | None) -> SideInfo:
    if side is None or spec_hash is None or spec_hash not in side.by_spec:
        return SideInfo(spec_hash, None, 0, 0)
    runs = side.by_spec[spec_hash]
    return SideInfo(spec_hash, side.workload_version.get(spec_hash), len(runs), sum(r.reached for r in runs))


def _tta_looks_worse(pair: PairReport) -> bool:
    tta = pair.metric("time_to_target_s")
    return tta is not None and tta.badness > math.log1p(pair.noise_floor)


def _compare_pair(key: SideKey, base: Side, cand: Side, spec_hash: str, s: Settings) -> PairReport:
    floor = cand.noise_floor.get(spec_hash)
    if floor is None:
        floor = base.noise_floor.get(spec_hash)
    source: Literal["spec", "default"] = "spec" if floor is not None else "default"
    pair = PairReport(
        key.hardware, key.workload, key.backend, SAME, _info(base, spec_hash), _info(cand, spec_hash),
        floor if floor is not None else s.default_noise_floor, source,
    )
    b_runs, c_runs = base.by_spec[spec_hash], cand.by_spec[spec_hash]
    pair.warnings = host_load_warnings(b_runs, c_runs)
    pair.metrics = [compare_metric(m, b_runs, c_runs, pair.noise_floor, s) for m in METRICS]
    if (few := too_few_seeds(len(b_runs), len(c_runs), s)) is not None:
        pair.verdict, pair.reason = NOT_COMPARABLE, few
        return pair
    gating = [m for m in pair.metrics if m.gating]
    if any(m.verdict == REGRESSED for m in gating):
        pair.verdict = REGRESSED
    elif any(m.verdict == IMPROVED for m in gating) and not _tta_looks_worse(pair):
        pair.verdict = IMPROVED  # good news only when time to target did not get worse, significant or not
    attribute(pair)
    return pair


def host_load_warnings(b_runs: Sequence[RunFigures], c_runs: Sequence[RunFigures]) -> list[str]:
    """One line per side whose runs were made on a loaded host (their timings may be slowed by other work)."""
    out = []
    for side, runs in (("baseline", b_runs), ("candidate", c_runs)):
        loaded = [r for r in runs if r.host_load]
        if loaded:
            out.append(f"{side}: {len(loaded)} of {len(runs)} run(s) on a busy host ({loaded[0].host_load})")
    return out


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


def compare_sides(base: dict[SideKey, Side], cand: dict[SideKey, Side], s: Settings) -> list[PairReport]:
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
            pairs.append(_compare_pair(key, b, c, h, s))
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
    strict: bool = False, validate: bool = False,
) -> Report:
    """Read both sides (result and/or baseline files) and compare; ResultError only for a missing path or
    under strict for a bad file."""
    s = settings or Settings()
    b: Loaded = load_paths(baseline, strict, validate)
    c: Loaded = load_paths(candidate, strict, validate)
    pairs = compare_sides(sides(b), sides(c), s)
    return Report(s, pairs, b.errors + c.errors, b.files, c.files)


# ---- output -----------------------------------------------------------------------------------------------


def _f(x: float | None) -> float | str | None:
    """A float for JSON, which has no infinity or NaN: inf -> "inf", NaN -> null."""
    if x is None or math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _summary_json(x: Summary | None) -> dict[str, Any] | None:
    return None if x is None else {"n": x.n, "center": _f(x.center), "median": _f(x.median), "min": _f(x.min),
                                   "max": _f(x.max)}


def _side_json(x: SideInfo) -> dict[str, Any]:
    return {"spec_hash": x.spec_hash, "workload_version": x.workload_version, "runs": x.runs, "reached": x.reached,
            "success_rate": _f(x.success_rate)}


def _metric_json(m: MetricResult) -> dict[str, Any]:
    return {"name": m.name, "label": m.label, "unit": m.unit, "lower_is_better": m.lower_is_better,
            "gating": m.gating, "verdict": m.verdict, "baseline": _summary_json(m.baseline),
            "candidate": _summary_json(m.candidate), "ratio": _f(m.ratio), "p_value": _f(m.p_value),
            "p_any_change": _f(m.p_any_change), "exact": m.exact,
            "note": m.note}


def to_json(report: Report) -> dict[str, Any]:
    """The machine-readable report; docs/compare.md documents every field. (Built by hand, not with
    dataclasses.asdict, which was a third of the time of a 10,000-file compare.)"""
    pairs = [{
        "hardware": p.hardware, "workload": p.workload, "backend": p.backend, "verdict": p.verdict,
        "reason": p.reason, "cause": p.cause, "cause_detail": p.cause_detail, "noise_floor": _f(p.noise_floor),
        "noise_floor_source": p.noise_floor_source, "baseline": _side_json(p.baseline),
        "candidate": _side_json(p.candidate), "metrics": [_metric_json(m) for m in p.metrics],
        "warnings": p.warnings,
    } for p in report.pairs]
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "kind": "trainbench-compare",
        "settings": asdict(report.settings),
        "summary": {**{k.replace(" ", "_"): v for k, v in report.counts.items()}, "pairs": len(report.pairs),
                    "exit_code": report.exit_code, "baseline_files": report.baseline_files,
                    "candidate_files": report.candidate_files, "bad_files": len(report.errors)},
        "pairs": pairs,
        "errors": report.errors,
    }


def fmt(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "∞"
    if unit == "bytes":
        for div, u in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if abs(value) >= div:
                return f"{value / div:.3g} {u}"
        return f"{value:.0f} B"
    if unit == "":  # a fraction (MFU)
        return f"{value:.1%}"
    if unit == "steps":
        return f"{value:,.0f}"
    if unit == "plain":
        return f"{value:,.4g}"
    if unit == "s" and abs(value) < 0.1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:,.4g} {unit}"


def _ratio_text(m: MetricResult | None) -> str:
    if m is None or m.ratio is None:
        return "-"
    return "∞" if math.isinf(m.ratio) else f"×{m.ratio:.3f}"


def _p_text(m: MetricResult | None) -> str:
    return "-" if m is None or m.p_value is None else f"{m.p_value:.3g}"


ICON = {REGRESSED: "🔴", NOT_COMPARABLE: "⚪", IMPROVED: "🟢", SAME: "✅"}


def summary_line(report: Report) -> str:
    c = report.counts
    head = (f"🔴 **{c[REGRESSED]} regression{'s' * (c[REGRESSED] != 1)}**" if c[REGRESSED]
            else "✅ **no regression**" if report.exit_code == EXIT_OK else "⚪ **nothing comparable**")
    rest = f"{c[IMPROVED]} improved · {c[SAME]} no significant change · {c[NOT_COMPARABLE]} not comparable"
    bad = f" · {len(report.errors)} bad file(s) skipped" if report.errors else ""
    return f"{head} in {len(report.pairs)} comparison(s): {rest}{bad}"


MARKDOWN_MAX_CHARS = 60_000  # GitHub refuses comments over 65,536 characters


def _row(p: PairReport) -> str:
    tta = p.metric("time_to_target_s")
    base = fmt(tta.baseline.center if tta and tta.baseline else None, "s")
    cand = fmt(tta.candidate.center if tta and tta.candidate else None, "s")
    why = p.reason or p.cause or ""
    if p.verdict == REGRESSED and not p.cause:
        why = ", ".join(f"{m.label} {_ratio_text(m)}" for m in p.metrics if m.gating and m.verdict == REGRESSED)
    return (f"| {ICON[p.verdict]} {p.verdict} | `{p.workload}` | {p.backend} | {p.hardware} | "
            f"{base} → {cand} | {_ratio_text(tta)} | {_p_text(tta)} | {why} |")


def to_markdown(report: Report, max_chars: int = MARKDOWN_MAX_CHARS) -> str:
    """The PR comment. Past max_chars, rows and details are cut from the least severe end, saying how many."""
    s = report.settings
    head = [
        "### TrainBench compare", "", summary_line(report), "",
        f"<sub>{s.test}, α = {s.alpha}; a change counts only if significant and beyond the noise floor "
        f"(the spec's `compare.noise_floor`, else {s.default_noise_floor:.0%}); gating metrics: "
        f"{', '.join(s.gate)}. Failed runs count as infinitely slow.</sub>", "",
    ]
    tail: list[str] = []
    if report.errors:
        shown = report.errors[:50]
        more = [f"... and {len(report.errors) - len(shown)} more"] if len(report.errors) > len(shown) else []
        tail = [f"<details><summary>{len(report.errors)} bad file(s) skipped</summary>", "",
                "```text", *shown, *more, "```", "", "</details>", ""]  # messages quote with backticks
    budget = max_chars - sum(len(x) + 1 for x in head + tail) - 400  # room for the two "cut" notes
    table = ["| | workload | backend | hardware | time to target, baseline → candidate | ratio | p (beyond floor) | cause / reason |",
             "|---|---|---|---|---|---|---|---|"] if report.pairs else []
    budget -= sum(len(x) + 1 for x in table)
    rows = 0
    for p in report.pairs:  # ordered by severity: what is cut is the least severe
        line = _row(p)
        if len(line) + 1 > budget:
            break
        table.append(line)
        budget -= len(line) + 1
        rows += 1
    if rows < len(report.pairs):
        table.append(f"| | ... and {len(report.pairs) - rows} more (least severe): see the JSON report "
                     "(`--json-out`) | | | | | | |")
    details: list[str] = []
    shown_details = 0
    for p in report.pairs[:rows]:
        block = _pair_details(p)
        size = sum(len(x) + 1 for x in block)
        if size > budget:
            break
        details += block
        budget -= size
        shown_details += 1
    if details or rows:
        details = ["", "<details><summary>Details: every metric of every comparison</summary>", "", *details]
        if shown_details < len(report.pairs):
            details.append(f"Details of {len(report.pairs) - shown_details} more comparison(s) are in the JSON report.")
            details.append("")
        details += ["</details>", ""]
    return "\n".join(head + table + details + tail)


def _pair_details(p: PairReport) -> list[str]:
    def rate(x: SideInfo) -> str:
        return f"{x.runs} run(s), {x.reached} reached" + (f" ({x.success_rate:.0%})" if x.runs else "")

    out = [f"#### {ICON[p.verdict]} `{p.workload}` · {p.backend} · {p.hardware}", "",
           f"baseline: {rate(p.baseline)}, spec `{p.baseline.spec_hash or '-'}` · candidate: {rate(p.candidate)}, "
           f"spec `{p.candidate.spec_hash or '-'}` · noise floor {p.noise_floor:.0%} ({p.noise_floor_source})", ""]
    if p.reason:
        out += [f"**not comparable:** {p.reason}", ""]
    out += [f"**warning:** {w}" for w in p.warnings] + ([""] if p.warnings else [])
    if p.cause:
        out += [f"**cause of the time-to-target change:** {p.cause} — {p.cause_detail}", ""]
    if p.metrics:
        out += ["| metric | baseline (center, min–max, n) | candidate (center, min–max, n) | ratio | p (beyond floor) | verdict |",
                "|---|---|---|---|---|---|"]
        for m in p.metrics:
            def side(x: Summary | None, unit: str = m.unit) -> str:
                bare = "plain" if unit in ("samples/s", "J") else unit  # the unit once, on the centre
                return "-" if x is None else f"{fmt(x.center, unit)} ({fmt(x.min, bare)}–{fmt(x.max, bare)}, n={x.n})"
            gate = "" if m.gating else " (not gating)"
            note = f" — {m.note}" if m.note and m.note != p.reason else ""
            out.append(f"| {m.label} | {side(m.baseline)} | {side(m.candidate)} | {_ratio_text(m)} | {_p_text(m)} | "
                       f"{m.verdict}{gate if m.verdict in (REGRESSED, IMPROVED) else ''}{note} |")
        out.append("")
    return out


# ---- the typed reader of the JSON report (`to_json` read back; the site reads compare output only so) ------


class ReportError(ValueError):
    """Not a compare report of this schema; the message names the file and what is wrong."""


def _num(x: Any) -> float | None:
    """The inverse of `_f`: "inf" / "-inf" back to infinities, null stays None."""
    if x is None:
        return None
    if x == "inf" or x == "-inf":
        return math.inf if x == "inf" else -math.inf
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise TypeError(f"{x!r} is not a number")
    return float(x)


def _verdict(x: Any) -> Verdict:
    if x not in SEVERITY:
        raise ValueError(f"verdict {x!r} is not one of {', '.join(SEVERITY)}")
    return x  # type: ignore[no-any-return]


def _summary_of(d: Any) -> Summary | None:
    if d is None:
        return None
    c, med, lo, hi = (math.nan if v is None else v for v in map(_num, (d["center"], d["median"], d["min"], d["max"])))
    return Summary(int(d["n"]), c, med, lo, hi)


def _side_of(d: Any) -> SideInfo:
    v = d["workload_version"]
    return SideInfo(d["spec_hash"], None if v is None else int(v), int(d["runs"]), int(d["reached"]))


def _metric_of(d: Any) -> MetricResult:
    return MetricResult(
        str(d["name"]), str(d["label"]), str(d["unit"]), bool(d["lower_is_better"]), bool(d["gating"]),
        _verdict(d["verdict"]), _summary_of(d["baseline"]), _summary_of(d["candidate"]), _num(d["ratio"]),
        _num(d["p_value"]), _num(d["p_any_change"]), d["exact"], str(d["note"]),
    )


def report_from_json(data: Any, source: str) -> Report:
    """The Report a `to_json` dict describes; ReportError names the source and the field that is wrong."""
    if not isinstance(data, dict) or data.get("kind") != "trainbench-compare":
        raise ReportError(f"{source}: not a compare report (no \"kind\": \"trainbench-compare\"); "
                          "write one with `trainbench compare ... --json-out FILE`")
    if data.get("schema_version") != REPORT_SCHEMA_VERSION:
        raise ReportError(f"{source}: compare report schema_version {data.get('schema_version')!r}; this "
                          f"trainbench reads {REPORT_SCHEMA_VERSION} (re-run compare)")
    try:
        st = data["settings"]
        settings = Settings(float(st["alpha"]), float(st["default_noise_floor"]), int(st["min_seeds"]),
                            tuple(str(g) for g in st["gate"]), str(st["test"]))
        pairs = [PairReport(
            str(p["hardware"]), str(p["workload"]), str(p["backend"]), _verdict(p["verdict"]), _side_of(p["baseline"]),
            _side_of(p["candidate"]), float(_num(p["noise_floor"]) or 0.0), p["noise_floor_source"],
            str(p["reason"]), p["cause"], str(p["cause_detail"]), [_metric_of(m) for m in p["metrics"]],
        ) for p in data["pairs"]]
        summary = data["summary"]
        return Report(settings, pairs, [str(e) for e in data["errors"]], int(summary["baseline_files"]),
                      int(summary["candidate_files"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ReportError(f"{source}: not a compare report of schema {REPORT_SCHEMA_VERSION} "
                          f"({type(e).__name__}: {e})") from None


def read_report(path: Path) -> Report:
    """A JSON report written by `trainbench compare --json-out`, as the typed Report it was made from."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ReportError(f"{path}: cannot read as JSON: {e}") from None
    except RecursionError:
        raise ReportError(f"{path}: cannot read as JSON: nested too deeply") from None
    return report_from_json(data, str(path))

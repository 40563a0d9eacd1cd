"""The data of a comparison: settings, verdicts, per-metric and per-pair results, the report (suite/compare/tta.py
fills them; suite/compare/output.py renders them)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from suite.results import stats
from suite.results.noise_floor import check_floor
from suite.results.stats import RunFigures

REPORT_SCHEMA_VERSION = 1
DEFAULT_ALPHA = 0.05
DEFAULT_NOISE_FLOOR = 0.05
DEFAULT_MIN_SEEDS = stats.DEFAULT_MIN_SEEDS  # 4: the fewest seeds a side that can reach DEFAULT_ALPHA
# the phase times exist only for RL post-training results (elsewhere "not measured", which gates nothing)
DEFAULT_GATE = ("time_to_target_s", "time_per_step_s", "peak_memory_bytes", "rollout_s_per_step",
                "training_s_per_step")
DEFAULT_THROUGHPUT_FLOOR = 0.01  # throughput A/B without a measured floor: 1% (a calibrated floor is better)
DEFAULT_MIN_RUNS = 4  # throughput runs per side: the interval resamples runs
DEFAULT_MIN_STEPS = 20  # measured steps per throughput run
EXIT_OK, EXIT_REGRESSION, EXIT_ERROR = 0, 1, 2

Verdict = Literal["regressed", "improved", "no significant change", "not comparable", "suspicious", "no change"]
REGRESSED: Final = "regressed"
IMPROVED: Final = "improved"
SAME: Final = "no significant change"  # TTA seeds (Mann-Whitney)
NO_CHANGE: Final = "no change"  # throughput A/B: the interval lies within the noise floor
SUSPICIOUS: Final = "suspicious"  # throughput A/B: point estimate beyond the floor, interval not
NOT_COMPARABLE: Final = "not comparable"
# regressions first, then what a human must look at, then good news, then nothing
SEVERITY = {REGRESSED: 0, SUSPICIOUS: 1, NOT_COMPARABLE: 2, IMPROVED: 3, SAME: 4, NO_CHANGE: 5}


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
    Metric("rollout_s_per_step", "rollout (generation) time per step", "s", True, "median",
           lambda f: f.rollout_s_per_step),
    Metric("training_s_per_step", "training (log-probs + update) time per step", "s", True, "median",
           lambda f: f.training_s_per_step),
)
# the wall-clock account (Result.goodput, docs/metrics.md): each part a metric of its own, so that compare names
# a significant change in any part (a compile-time regression is a regression). Not gating by default: a part of
# a CPU smoke run is milliseconds and noisy; `--gate goodput_compile_s` (or any part) makes one gate
GOODPUT_PARTS = ("startup_s", "init_s", "checkpoint_restore_s", "compile_s", "steps_s", "data_wait_s", "eval_s",
                 "checkpoint_save_s", "lost_s", "recovery_s", "teardown_s")
METRICS += tuple(
    Metric(f"goodput_{p}", f"wall clock: {p[:-2].replace('_', ' ')}", "s", True, "median",
           lambda f, p=p: f.goodput_parts_s.get(p) if f.goodput_parts_s else None)
    for p in GOODPUT_PARTS
) + (Metric("goodput", "goodput", "", False, "median", lambda f: f.goodput),)
PHASE_METRICS = {"rollout_s_per_step": "rollout", "training_s_per_step": "training"}
METRIC_NAMES = tuple(m.name for m in METRICS)


@dataclass(frozen=True)
class Settings:
    alpha: float = DEFAULT_ALPHA
    default_noise_floor: float = DEFAULT_NOISE_FLOOR
    min_seeds: int = DEFAULT_MIN_SEEDS
    gate: tuple[str, ...] = DEFAULT_GATE
    throughput_noise_floor: float = DEFAULT_THROUGHPUT_FLOOR
    min_runs: int = DEFAULT_MIN_RUNS
    min_steps: int = DEFAULT_MIN_STEPS
    n_boot: int = 2000
    test: str = (
        "exact two-sided Mann-Whitney U with the noise floor as margin (normal approximation above 60 pooled runs)"
    )

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha {self.alpha}: must be between 0 and 1")
        check_floor(self.default_noise_floor, "--noise-floor")
        check_floor(self.throughput_noise_floor, "--throughput-noise-floor")
        if self.min_seeds < 1:
            raise ValueError(f"--min-seeds {self.min_seeds}: must be at least 1 (runs per side)")
        if self.min_runs < 2 or self.min_steps < 1:
            raise ValueError(f"--min-runs {self.min_runs} / --min-steps {self.min_steps}: need >= 2 runs, >= 1 step")
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
    ci_low: float | None = None  # throughput A/B: the ratio's interval
    ci_high: float | None = None

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
    noise_floor_source: Literal["measured", "spec", "default"]
    reason: str = ""  # why not comparable
    cause: str | None = None  # for a time-to-target change: convergence | throughput | both | ...
    cause_detail: str = ""
    metrics: list[MetricResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. a run made on a loaded host
    mode: str = "tta"  # tta: seeds and Mann-Whitney; throughput: A/B step times and a bootstrap interval
    floor_note: str = ""  # a candidate's own floor that was ignored, a measured floor that did not apply
    rcp: dict[str, Any] | None = None  # the convergence guard's verdict (suite/compare/rcp_guard.py: RcpCheck)
    rcp_note: str = ""  # why an RCP that exists could not be applied
    phase: str | None = None  # RL post-training: which part regressed (or improved): rollout | training | both

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
    left_out: list[str] = field(default_factory=list)  # valid results of a mode the other side does not have

    @property
    def counts(self) -> dict[str, int]:
        return {v: sum(p.verdict == v for p in self.pairs) for v in SEVERITY}

    @property
    def exit_code(self) -> int:
        if not any(p.verdict != NOT_COMPARABLE for p in self.pairs):
            return EXIT_ERROR
        return EXIT_REGRESSION if any(p.verdict == REGRESSED for p in self.pairs) else EXIT_OK

"""Throughput A/B verdicts: the ratio of median step times head/base with a hierarchical bootstrap interval.

Both sides are throughput-mode result files made on the same runner, alternating (`trainbench ab`). Each run
holds every measured step's time. The interval resamples runs, then steps within each resampled run (a
two-level bootstrap), so that the run-to-run variance (a neighbour, a clock change between blocks) is in it, not
only the step-to-step noise that thousands of steps would shrink to nothing. docs/compare.md says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec
import numpy as np

from suite.results import key as compare_key
from suite.results.noise_floor import NoiseFloor
from suite.results.record import ResultError
from suite.results.runfiles import Loaded, RunRecord, SideKey

MAX_BOOT_CELLS = 4_000_000  # resampled step times held at once (32 MB of float64)


class CompareInputError(ValueError):
    """Bad input to a comparison (exit 2, nothing written); the message names the file, field or flag."""


@dataclass(frozen=True)
class Interval:
    ratio: float  # pooled median step time, head / base
    ci_low: float
    ci_high: float
    base_median_s: float
    head_median_s: float


def _medians(runs: Sequence[np.ndarray], picks: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """One bootstrap median per row of `picks` (run indices drawn with replacement): from each picked run, as many
    steps as a typical run has, with replacement (`draws`: uniforms in [0, 1), one per step drawn); the median of
    all picked steps."""
    lens = np.array([len(r) for r in runs])
    flat = np.concatenate(runs)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    n_boot, n_runs = picks.shape
    idx = starts[picks][..., None] + (draws * lens[picks][..., None]).astype(np.int64)
    return np.median(flat[idx].reshape(n_boot, -1), axis=1)


def _boot_ratios(b_runs: list[np.ndarray], h_runs: list[np.ndarray], n_boot: int, rng: np.random.Generator,
                 paired: bool) -> np.ndarray:
    """Bootstrap ratios head/base of pooled medians, in chunks that hold at most MAX_BOOT_CELLS step draws.

    paired: the rounds are drawn jointly; and when each round's two runs have as many steps (lockstep: step i of
    base and step i of head ran one after the other), the steps are drawn jointly too, as pairs, so what a
    moment did to both sides (a neighbour's burst) cancels in the ratio instead of widening the interval."""
    b_per, h_per = int(np.median([len(r) for r in b_runs])), int(np.median([len(r) for r in h_runs]))
    step_pairs = paired and b_per == h_per and all(len(b) == len(h) for b, h in zip(b_runs, h_runs, strict=True))
    chunk = max(1, MAX_BOOT_CELLS // (len(b_runs) * b_per + len(h_runs) * h_per))
    out = np.empty(n_boot)
    for lo in range(0, n_boot, chunk):
        b = min(chunk, n_boot - lo)
        b_pick = rng.integers(0, len(b_runs), (b, len(b_runs)))
        h_pick = b_pick if paired else rng.integers(0, len(h_runs), (b, len(h_runs)))
        b_draws = rng.random((b, len(b_runs), b_per))
        h_draws = b_draws if step_pairs else rng.random((b, len(h_runs), h_per))
        out[lo:lo + b] = _medians(h_runs, h_pick, h_draws) / _medians(b_runs, b_pick, b_draws)
    return out


def ratio_interval(base: Sequence[Sequence[float]], head: Sequence[Sequence[float]], alpha: float = 0.05,
                   n_boot: int = 2000, seed: int = 0, paired: bool = False) -> Interval:
    """Ratio of pooled medians head/base and its (1 - alpha) percentile interval by the two-level bootstrap.

    paired: base[i] and head[i] ran in the same round (side by side in lockstep, or in adjacent blocks), so the
    rounds are resampled jointly (and, in lockstep, the steps: `_boot_ratios`)."""
    b_runs = [np.asarray(r, dtype=float) for r in base]
    h_runs = [np.asarray(r, dtype=float) for r in head]
    if paired and len(b_runs) != len(h_runs):
        raise ValueError(f"paired runs need as many base runs as head runs ({len(b_runs)} != {len(h_runs)})")
    ratios = _boot_ratios(b_runs, h_runs, n_boot, np.random.default_rng(seed), paired)
    lo, hi = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    base_med = float(np.median(np.concatenate(b_runs)))
    head_med = float(np.median(np.concatenate(h_runs)))
    return Interval(head_med / base_med, float(lo), float(hi), base_med, head_med)


def verdict(iv: Interval, floor: float) -> tuple[str, str]:
    """(verdict, note) for step time (lower is better). The floor is symmetric in log: 1+f slower, 1/(1+f) faster."""
    up, down = 1 + floor, 1 / (1 + floor)
    if iv.ci_low > up:
        return "regressed", f"the whole interval is beyond the {floor:.1%} noise floor"
    if iv.ci_high < down:
        return "improved", f"the whole interval is beyond the {floor:.1%} noise floor"
    if iv.ratio > up or iv.ratio < down:
        return "suspicious", (f"the point estimate x{iv.ratio:.3f} is beyond the {floor:.1%} noise floor but the "
                              f"interval [{iv.ci_low:.3f}, {iv.ci_high:.3f}] is not: rerun with more --rounds")
    return "no change", ""


# ---- reading the step times -----------------------------------------------------------------------------------


class _Steps(msgspec.Struct):
    step_times_s: list[float] = []


_STEPS = msgspec.json.Decoder(_Steps)


def step_times(record: RunRecord) -> list[float]:
    try:
        return _STEPS.decode(Path(record.source).read_bytes()).step_times_s
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ResultError(f"{record.source}: step_times_s: {e}") from None


@dataclass
class ABGroup:
    """The throughput runs of one (hardware, workload, backend) on one side."""

    key: SideKey
    records: list[RunRecord]
    steps: list[list[float]]

    @property
    def spec_hashes(self) -> set[str]:
        return {r.spec_hash for r in self.records}

    @property
    def rounds(self) -> list[int]:
        return [r.figures.seed for r in self.records]


def paired(base: ABGroup, head: ABGroup) -> bool:
    """Both sides ran the same rounds, one run each: the runs pair up (`trainbench ab` gives round r seed r)."""
    return base.rounds == head.rounds and len(set(base.rounds)) == len(base.rounds)


def check_modes(base: Loaded, cand: Loaded) -> bool:
    """True if this is a throughput comparison; bad input (mixed modes, baseline files) raises."""
    def modes(loaded: Loaded) -> dict[str, str]:
        return {r.mode: r.source for r in loaded.records}

    b, c = modes(base), modes(cand)
    every = {**b, **c}
    if "throughput" not in every:
        return False
    if len(every) > 1:
        t = (b | c)["throughput"]
        other = next(src for m, src in (b | c).items() if m != "throughput")
        raise CompareInputError(
            f"a throughput result ({t}) cannot be compared with a time-to-target result ({other}): compare two "
            "folders of `trainbench run --mode throughput` (e.g. the two sides of `trainbench ab`), or two of TTA runs")
    if base.baselines or cand.baselines:
        src = (base.baselines or cand.baselines)[0][0]
        raise CompareInputError(f"{src}: a baseline file holds time-to-target seeds; throughput results are compared "
                                "with throughput results of the other commit on the same runner (`trainbench ab`)")
    return True


MODE_NAMES = {"tta": "time-to-target", "throughput": "throughput"}


def _has(loaded: Loaded, mode: str) -> bool:
    return any(r.mode == mode for r in loaded.records) or (mode == "tta" and bool(loaded.baselines))


def split_modes(base: Loaded, cand: Loaded) -> tuple[dict[str, tuple[Loaded, Loaded]], list[str]]:
    """Each mode that both sides hold (baseline files hold time-to-target seeds), as (base, cand) parts, and a line
    per result left out because the other side has no result of its mode.

    README's flow writes `run --mode throughput` results into results/ beside the seeds: `compare --candidate
    results/` used to refuse the whole folder. Modes are never mixed within a comparison; where the sides share
    no mode at all, `check_modes` decides (and refuses a throughput side against a time-to-target side)."""
    shared = [m for m in ("tta", "throughput") if _has(base, m) and _has(cand, m)]
    if not shared:
        mode = "throughput" if check_modes(base, cand) else "tta"
        return {mode: (base, cand)}, []
    left_out: list[str] = []
    for loaded, other in ((base, "candidate"), (cand, "baseline")):
        for rec in loaded.records:
            if rec.mode not in shared:
                left_out.append(f"{rec.source}: a {MODE_NAMES.get(rec.mode, rec.mode)} result; the {other} side "
                                f"has none of that mode to compare it with")
        if "tta" not in shared:
            left_out += [f"{src}: a baseline file (time-to-target seeds); the {other} side has only throughput "
                         "results" for src, _ in loaded.baselines]
    parts = {m: tuple(replace(x, records=[r for r in x.records if r.mode == m],
                              baselines=x.baselines if m == "tta" else [], errors=[]) for x in (base, cand))
             for m in shared}
    return parts, left_out  # type: ignore[return-value]


def groups(loaded: Loaded, side: str, min_steps: int) -> dict[SideKey, ABGroup]:
    out: dict[SideKey, ABGroup] = {}
    for rec in loaded.records:
        if rec.figures.status != "measured":
            continue  # reported by the caller as failed runs
        times = step_times(rec)
        if len(times) < min_steps:
            raise CompareInputError(
                f"{rec.source}: {len(times)} measured step(s); the {side} side needs at least {min_steps} per run "
                "(raise throughput.measure_steps with --set, or lower --min-steps)")
        if not all(math.isfinite(t) and t > 0 for t in times):
            raise CompareInputError(f"{rec.source}: step_times_s holds a non-positive or non-finite time")
        g = out.setdefault(rec.key, ABGroup(rec.key, [], []))
        g.records.append(rec)
        g.steps.append(times)
    for g in out.values():  # in round order (the seed is the round), so that pairs line up
        order = sorted(range(len(g.records)), key=lambda i: g.records[i].figures.seed)
        g.records, g.steps = [g.records[i] for i in order], [g.steps[i] for i in order]
        if mixed := compare_key.mixed([r.comparison for r in g.records]):
            raise CompareInputError(f"the {side} side's {g.key.workload} runs mix configurations: {'; '.join(mixed)}; "
                                    "one side must be one configuration")
    return out


def failed(loaded: Loaded) -> dict[SideKey, list[RunRecord]]:
    out: dict[SideKey, list[RunRecord]] = {}
    for rec in loaded.records:
        if rec.figures.status != "measured":
            out.setdefault(rec.key, []).append(rec)
    return out


def measured_floor(floors: Sequence[NoiseFloor], key: SideKey, comparison: dict) -> tuple[NoiseFloor | None, str]:
    """The A/A floor stored for this runner and workload, if its configuration matches (else a note why not)."""
    found = [f for f in floors if (f.hardware, f.workload, f.backend) == (key.hardware, key.workload, key.backend)]
    if not found:
        return None, ""
    f = found[-1]
    if f.comparison_key and (diff := compare_key.differences(f.comparison_key, comparison)):
        return None, f"the measured floor {f.source} is for another configuration ({'; '.join(diff)}): not used"
    return f, ""

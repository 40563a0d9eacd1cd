"""The convergence guard: a candidate's samples to target against its Reference Convergence Point (MLPerf's RCPs).

The method is mlperf_logging.rcp_checker's own, called, not re-derived: the reference's olympic mean and standard
deviation; the smallest candidate mean a one-sided pooled t-test at alpha 0.05 cannot tell from it (`Min Epochs`,
found by the checker's binary search); a candidate whose olympic mean lies below it converged significantly faster
than the reference. As MLPerf does, a candidate faster than the reference mean has its time to target multiplied by
reference mean / candidate mean (the checker's normalization factor), the raw figure kept beside it.
TrainBench's own workloads use the RCPs `trainbench baseline rcp` made (suite/results/rcp.py), with the checker's
submission count set to the candidate's seeds; MLPerf-named recipes use the RCPs the dependency ships.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from suite.results.rcp import RCP
from suite.results.stats import RunFigures

RULESET = "6.1.0"
ALPHA = 0.05  # the checker's own (RCP_Checker.alpha)
PASS = "pruned_rcps"  # the checker's default pass (its main() and the package checker)
FASTER = "converged faster than the reference"
SLOWER = "converged slower than the reference"
WITHIN = "within the reference"


@dataclass
class RcpCheck:
    source: str  # the RCP file, or the shipped mlperf_logging file
    benchmark: str
    global_batch_size: int
    how: str  # "RCP found" | "RCP interpolation" (the checker's words)
    reference_mean: float  # samples, olympic mean
    reference_stdev: float
    reference_seeds: int
    min_mean: float  # the checker's Min Epochs: below it, significantly faster
    candidate_mean: float  # samples, olympic mean (inf: more than one seed did not reach the target)
    candidate_seeds: int
    p_faster: float  # one-sided pooled t-test, the checker's _find_p_value
    p_slower: float
    verdict: str  # FASTER | SLOWER | WITHIN
    norm_factor: float  # >= 1; time to target is multiplied by it
    note: str = ""
    tta_raw_s: float | None = None
    tta_normalized_s: float | None = None


def _checker(raw: dict[str, Any], benchmark: str, n_cand: int) -> Any:
    """An RCP_Checker over these raw records with submission_runs = the candidate's seeds. Its __init__ only reads
    the JSON and looks the submission count up in MLPerf's table (which knows only MLPerf's benchmarks); the
    statistics are the class's own methods."""
    from mlperf_logging.rcp_checker.rcp_checker import RCP_Checker

    c = RCP_Checker.__new__(RCP_Checker)
    c.usage, c.ruleset, c.benchmark, c.verbose = "training", RULESET, benchmark, False
    c.alpha, c.tolerance, c.submission_runs = ALPHA, 1e-4, n_cand
    c.rcp_data = dict(sorted(c._process_raw_rcp_data(raw).items(), key=lambda item: item[1]["BS"]))
    c.compute_rcp_stats()
    return c


def shipped_raw(benchmark: str) -> dict[str, Any] | None:
    """The RCPs mlperf_logging ships for an MLPerf benchmark name (training_6.1.0/rcps_<name>.json), or None."""
    from mlperf_logging.rcp_checker import rcp_checker

    path = Path(rcp_checker.__file__).parent / f"training_{RULESET}" / f"rcps_{benchmark}.json"
    if benchmark not in rcp_checker.submission_runs["training"] or not path.exists():
        return None
    import json

    return json.loads(path.read_text(encoding="utf-8"))


def _olympic(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return float(sum(s[1:-1]) / (len(s) - 2)) if len(s) > 2 else float(sum(s) / len(s))


def check_samples(raw: dict[str, Any], benchmark: str, bs: int, cand_samples: Sequence[float], source: str,
                  interpolate: bool = True) -> RcpCheck | str:
    """The checker's verdict on one candidate's samples to target (inf = did not reach it), or why there is none."""
    n = len(cand_samples)
    if n < 3:
        return f"{n} candidate seed(s): the olympic mean needs at least 3"
    unreached = sum(1 for x in cand_samples if math.isinf(x))
    c = _checker(raw, benchmark, n)
    record, how = c._find_rcp(bs, PASS), "RCP found"
    if record is None:
        lo, hi = c._find_top_min_rcp(bs, PASS), c._find_bottom_max_rcp(bs, PASS)
        if not interpolate or lo is None or hi is None:
            have = sorted(r["BS"] for r in c.rcp_data.values())
            return (f"no RCP at global batch size {bs} (RCPs exist for {have}); make one at this batch size "
                    "(`trainbench baseline rcp`), the checker interpolates only between two")
        _, record = c._create_interp_rcp(bs, lo, hi)
        how = "RCP interpolation"
    ref_n = len(record["Epochs to converge"]) - 2 if record["Epochs to converge"] else c.submission_runs * 2
    if unreached > 1:  # MLPerf: more than one run that did not converge is "Insufficient convergence"
        return RcpCheck(source, benchmark, bs, how, float(record["RCP Mean"]), float(record["RCP Stdev"]), ref_n + 2,
                        float(record["Min Epochs"]), math.inf, n, 1.0, 0.0, SLOWER, 1.0,
                        f"{unreached} of {n} seeds did not reach the target (MLPerf: insufficient convergence)")
    mean = _olympic(cand_samples)
    passed, factor = c._eval_submission_record(dict(record), list(cand_samples), "")
    stdev = float(record["RCP Stdev"])
    if stdev > 0:
        _, p_faster = c._find_p_value(mean, stdev, n - 2, record["RCP Mean"], stdev, ref_n)
    else:
        p_faster = 0.0 if mean < record["RCP Mean"] else 1.0
    p_slower = 1.0 - p_faster
    verdict = FASTER if not passed else SLOWER if p_slower <= ALPHA else WITHIN
    return RcpCheck(source, benchmark, bs, how, float(record["RCP Mean"]), stdev, ref_n + 2,
                    float(record["Min Epochs"]), mean, n, float(p_faster), float(p_slower), verdict, float(factor))


# ---- the candidate's global batch size (MLPerf-named recipes: the shipped RCPs are per batch size) ----------


class _Data(msgspec.Struct, frozen=True):
    batch_size: int | None = None


class _Spec(msgspec.Struct, frozen=True):
    data: _Data = _Data()


class _Config(msgspec.Struct, frozen=True):
    spec: _Spec = _Spec()


class _Head(msgspec.Struct):
    config: _Config = _Config()


_BS = msgspec.json.Decoder(_Head)


def batch_size_of(source: str) -> int | None:
    """data.batch_size (the global batch) from a result file, or None where it cannot be read."""
    try:
        return _BS.decode(Path(source).read_bytes()).config.spec.data.batch_size
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def guard(workload: str, spec_hash: str, cand: Sequence[RunFigures], cand_sources: Sequence[str],
          rcps: dict[tuple[str, str], RCP]) -> RcpCheck | str | None:
    """The RCP verdict of one pair's candidate runs; a string says why none could be made; None: no RCP applies."""
    own = rcps.get((workload, spec_hash))
    short = workload.rpartition("/")[2]
    if own is not None:
        raw, bs, source, name = own.as_mlperf(), own.global_batch_size, own.source, workload
    elif (shipped := shipped_raw(short)) is not None:
        sizes = {batch_size_of(s) for s in cand_sources}
        if len(sizes) != 1 or None in sizes:
            return f"MLPerf's {short} RCPs are per global batch size; the candidate's could not be read from its results"
        bs = sizes.pop()  # type: ignore[assignment]
        have = sorted(r["BS"] for r in shipped.values())
        if not have[0] <= bs <= have[-1]:  # e.g. a CPU variant: MLPerf's reference says nothing about it
            return (f"global batch size {bs} is outside MLPerf's {short} RCPs ({have[0]}..{have[-1]}): not a "
                    "configuration the reference covers, not checked")
        raw, source, name = shipped, f"mlperf_logging training_{RULESET}/rcps_{short}.json", short
    else:
        return None
    samples = [math.inf if r.steps() == math.inf else float(r.steps()) * bs for r in cand]
    out = check_samples(raw, name, bs, samples, source)
    if isinstance(out, RcpCheck):
        ttas = [r.tta() for r in cand]
        out.tta_raw_s = _olympic(ttas) if ttas else None
        if out.tta_raw_s is not None and math.isfinite(out.tta_raw_s):
            out.tta_normalized_s = out.tta_raw_s * out.norm_factor
    return out


def submission_check(rcp: Any, runs: list[tuple[str, int | None]], tta_s: float) -> dict[str, Any] | None:
    """The leaderboard's verdict on one submission of the RCP's spec (its runs' (status, steps to target)): None
    when the guard cannot apply, else whether it converged significantly faster and its normalized time."""
    bs = rcp.global_batch_size
    samples = [float(steps) * bs if steps is not None and status == "reached" else math.inf for status, steps in runs]
    out = check_samples(rcp.as_mlperf(), rcp.benchmark, bs, samples, rcp.source)
    if isinstance(out, str):
        return None
    return {"faster": out.verdict == FASTER, "norm_factor": out.norm_factor, "p": out.p_faster,
            "tta_normalized_s": tta_s * out.norm_factor if math.isfinite(tta_s) else tta_s}

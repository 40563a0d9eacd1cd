"""The site's view of the data: results grouped into submissions and leaderboards, baselines and compare files.

A *submission* is the seeds of one (workload, spec hash, hardware, backend, precision, commit): one
leaderboard row, aggregated with suite.stats (olympic mean; a run that never reached the target is
infinite, never missing). The leaderboard of a workload shows, per spec hash, the latest submission of
each (hardware, backend, precision); the workload page keeps the whole history. Baseline files are read
through suite.baselines' typed reader (compare reports and studies: suite/site/reports.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite import baselines as bl
from suite.results import Result, ResultError, slug
from suite.stats import Aggregate, aggregate_results, tta_or_inf


def short_hash(text: str, n: int = 8) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def workload_page(workload: str) -> str:
    """`w/<slug>-<hash>.html`: readable, and unique even when two names slug alike."""
    return f"w/{slug(workload.replace('/', '-'))}-{short_hash(workload, 6)}.html"


def _str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default if value is None else str(value)


def spec_of(r: Result) -> dict[str, Any]:
    spec = r.config.get("spec")
    return spec if isinstance(spec, dict) else {}


def precision_of(r: Result) -> str:
    return _str(r.config.get("precision"), "fp32")


def target_of(r: Result) -> dict[str, Any]:
    t = spec_of(r).get("target")
    return t if isinstance(t, dict) else {}


def target_metric(r: Result) -> str | None:
    m = target_of(r).get("metric")
    return m if isinstance(m, str) else None


def target_value(r: Result) -> float | None:
    v = target_of(r).get("value")
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def domain_of(r: Result) -> str:
    d = spec_of(r).get("domain")
    return d if isinstance(d, str) and d else (r.workload.partition("/")[0] if "/" in r.workload else "other")


@dataclass
class RunRow:
    path: Path  # the result file
    rel: str  # its path under the results folder, shown and hashed into the page name
    result: Result
    page: str  # r/<id>.html, relative to the site root
    json_copy: str  # r/<id>.json
    mllog_copy: str | None = None  # r/<id>.mllog.txt when the named log exists beside the result
    mllog_note: str = ""  # why there is no log link, when Result.mllog names one

    @property
    def tta(self) -> float:
        return tta_or_inf(self.result)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


@dataclass
class Submission:
    workload: str
    spec_hash: str
    hardware: str
    backend: str
    precision: str
    sha: str
    runs: list[RunRow]
    agg: Aggregate = field(init=False)

    def __post_init__(self) -> None:
        self.runs.sort(key=lambda rr: (rr.result.seed, rr.result.started_at))
        self.agg = aggregate_results([rr.result for rr in self.runs])  # the one aggregation (suite.stats)

    @property
    def series(self) -> str:
        return f"{self.hardware} · {self.backend} · {self.precision}"

    @property
    def latest(self) -> Result:
        return max((rr.result for rr in self.runs), key=lambda r: r.started_at)

    @property
    def timestamp(self) -> float:
        return self.latest.started_at.timestamp()

    @property
    def algorithm(self) -> str:
        """The `--algo` label the runs were made with ('' for the spec's own optimizer)."""
        algo = self.latest.config.get("algorithm")
        return str(algo.get("label", "")) if isinstance(algo, dict) else ""

    @property
    def dirty(self) -> bool:
        return any(rr.result.git.dirty for rr in self.runs)

    @property
    def backend_version(self) -> str:
        return _str(self.latest.backend_version)

    @property
    def device(self) -> str:
        hw = self.latest.hardware
        return f"{hw.device_name} ×{hw.device_count}"

    @property
    def energy_to_target_j(self) -> float | None:
        return _median([r.result.energy_to_target_j for r in self.runs if r.result.energy_to_target_j is not None])

    @property
    def energy_j(self) -> float | None:
        return _median([r.result.energy_j for r in self.runs if r.result.energy_j is not None])

    @property
    def tokens_per_s(self) -> float | None:
        return _median([r.result.throughput["tokens_per_s"] for r in self.runs if "tokens_per_s" in r.result.throughput])


@dataclass
class Baseline:
    """A blessed baseline on the site: the file (read by suite.baselines' typed reader) and its aggregate,
    recomputed from the stored seeds by suite.stats, so it is the figure a leaderboard row of the same runs shows."""

    path: str  # relative to the baselines folder
    baseline: bl.Baseline
    agg: Aggregate

    @property
    def workload(self) -> str:
        return self.baseline.workload

    @property
    def hardware(self) -> str:
        return self.baseline.hardware

    @property
    def backend(self) -> str:
        return self.baseline.backend

    @property
    def spec_hash(self) -> str:
        return self.baseline.spec_hash

    @property
    def tta_s(self) -> float:
        return self.agg.tta_olympic_s


@dataclass
class Workload:
    name: str
    domain: str
    page: str
    runs: list[RunRow] = field(default_factory=list)
    submissions: list[Submission] = field(default_factory=list)
    baselines: list[Baseline] = field(default_factory=list)

    @property
    def latest(self) -> Result:
        return max((rr.result for rr in self.runs), key=lambda r: r.started_at)

    @property
    def description(self) -> str:
        return _str(spec_of(self.latest).get("description"))

    @property
    def target(self) -> dict[str, Any]:
        return target_of(self.latest)

    def leaderboards(self) -> list[tuple[str, list[Submission]]]:
        """Per spec hash (newest first): the latest submission of each (hardware, backend, precision), ranked."""
        by_hash: dict[str, dict[tuple[str, str, str], Submission]] = defaultdict(dict)
        for s in self.submissions:
            k = (s.hardware, s.backend, s.precision)
            cur = by_hash[s.spec_hash].get(k)
            if cur is None or s.timestamp > cur.timestamp:
                by_hash[s.spec_hash][k] = s
        boards = [(h, rank(list(rows.values()))) for h, rows in by_hash.items()]
        boards.sort(key=lambda hb: -max(s.timestamp for s in hb[1]))
        return boards

    def baseline_for(self, s: Submission) -> Baseline | None:
        """The baseline of the same hardware and backend, preferring one of the same spec hash."""
        same = [b for b in self.baselines if b.hardware == s.hardware and b.backend == s.backend]
        return next((b for b in same if b.spec_hash == s.spec_hash), same[0] if same else None)


def rank_key(s: Submission) -> tuple[float, float, str]:
    tta = s.agg.tta_olympic_s
    return (tta if not math.isnan(tta) else math.inf, -s.agg.success_rate, s.series)


def rank(subs: list[Submission]) -> list[Submission]:
    return sorted(subs, key=rank_key)


def build_workloads(rows: list[RunRow]) -> list[Workload]:
    workloads: dict[str, Workload] = {}
    groups: dict[tuple[str, ...], list[RunRow]] = defaultdict(list)
    for rr in rows:
        r = rr.result
        w = workloads.get(r.workload)
        if w is None:
            w = workloads[r.workload] = Workload(r.workload, domain_of(r), workload_page(r.workload))
        w.runs.append(rr)
        groups[(r.workload, r.spec_hash, r.hardware.slug, r.backend, precision_of(r), r.git.sha or "unknown")].append(rr)
    for (wl, spec_hash, hw, backend, precision, sha), runs in groups.items():
        workloads[wl].submissions.append(Submission(wl, spec_hash, hw, backend, precision, sha, runs))
    for w in workloads.values():
        w.runs.sort(key=lambda rr: rr.result.started_at)
        w.submissions.sort(key=lambda s: s.timestamp)
    return sorted(workloads.values(), key=lambda w: (w.domain, w.name))


# ---- side files: baselines and compare reports ----------------------------------------------------------


def load_baselines(root: Path | None) -> tuple[list[Baseline], list[str]]:
    """baselines/<hardware>/<domain>/<workload>/<backend>.json through suite.baselines' typed reader;
    a file that is not a valid baseline is named in the errors and skipped."""
    if root is None or not root.exists():
        return [], []
    try:
        found, errors = bl.load_baselines(root)
    except ResultError as e:
        return [], [str(e)]
    base = root if root.is_dir() else root.parent
    return [Baseline(p.relative_to(base).as_posix(), b, b.figures()) for p, b in found], errors


def cell_text(value: Any, limit: int = 400) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, float):
        text = f"{value:.6g}"
    elif value is None or isinstance(value, bool | int):
        text = json.dumps(value)
    else:
        text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def flatten(data: Any, prefix: str = "", depth: int = 0, out: dict[str, Any] | None = None) -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay values (they are shown as JSON)."""
    out = {} if out is None else out
    if isinstance(data, dict) and depth < 6 and data:
        for k, v in data.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), depth + 1, out)
    else:
        out[prefix or "value"] = data
    return out

"""The site's view of the data: results grouped into submissions and leaderboards, baselines and compare files.

A *submission* is the seeds of one (workload, spec hash, hardware, backend, precision, commit): one
leaderboard row, aggregated with suite.results.stats (olympic mean; a run that never reached the target is
infinite, never missing). The leaderboard of a workload shows, per spec hash, the latest submission of
each (hardware, backend, precision); the workload page keeps the whole history. Baseline files are read
through suite.results.baselines' typed reader (compare reports and studies: suite/site/pages/compare/, pages/study/).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from suite.results.imported import ImportedFrom
from suite.results.index.rows import target_of as target_of_column
from suite.results.record import Result, slug
from suite.results.stats import Aggregate, RunFigures, aggregate, tta_of
from suite.site import goodput_history
from suite.site.baselines import Baseline
from suite.site.published import Reference, imported_of, newest_target, published_key, with_references


def short_hash(text: str, n: int = 8) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def workload_page(workload: str) -> str:
    """`w/<slug>-<hash>.html`: readable, and unique even when two names slug alike."""
    return f"w/{slug(workload.replace('/', '-'))}-{short_hash(workload, 6)}.html"


def month_page(workload: str, month: str) -> str:
    """`w/<slug>-<hash>-YYYY-MM.html`: the runs and submissions of one earlier month of a workload."""
    return workload_page(workload).removesuffix(".html") + f"-{month}.html"


def month_of(when: datetime) -> str:
    utc = when.astimezone(UTC)
    return f"{utc.year:04d}-{utc.month:02d}"


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


def target_metric(target: dict[str, Any]) -> str | None:
    m = target.get("metric")
    return m if isinstance(m, str) else None


def target_value(target: dict[str, Any]) -> float | None:
    v = target.get("value")
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


# the index columns (suite/results/index/rows.py) a run row is made of, in RunRow's order after path and the page names
ROW_COLUMNS = ("path", "source", "run_id", "seed", "status", "started_at", "hardware", "backend", "precision",
               "git_sha", "git_dirty", "spec_hash", "workload", "domain", "tta_s", "steps", "steps_to_target",
               "train_s", "samples_per_s", "time_per_step_s", "mfu", "peak_memory_bytes", "energy_j",
               "energy_to_target_j", "backend_version", "device_name", "device_count", "algorithm", "description",
               "rollout_s_per_step", "training_s_per_step", "target", "mllog", "imported", "synthetic_data",
               "variant", "host_load", "goodput")


@dataclass(slots=True)
class RunRow:
    """One run as the leaderboards, workload pages and run lists show it: the index's typed columns, never the
    whole Result (which only the run's own page reads). Quacks like suite.results.stats.RunFigures for `aggregate`."""

    root: Path  # the results folder
    rel: str  # the result file's path under it (where it was, for a run in an archive): shown, hashed into the page name
    page: str  # r/<id>.html, relative to the site root
    json_copy: str  # r/<id>.json
    source: str  # '' for a loose file, else the archive (relative to the results folder) holding it
    run_id: str
    seed: int
    status: str
    started_at: datetime
    hardware: str
    backend: str
    precision: str
    git_sha: str | None
    dirty: bool
    spec_hash: str
    workload: str
    domain: str
    time_to_target_s: float | None
    n_steps: int
    steps_to_target: int | None
    train_s: float
    samples_per_s: float | None
    time_per_step_s: float | None
    mfu: float | None
    peak_memory_bytes: float | None
    energy_j: float | None
    energy_to_target_j: float | None
    backend_version: str
    device_name: str
    device_count: int
    algorithm: str
    description: str
    rollout_s_per_step: float | None  # RL post-training: the step's generation and training phases
    training_s_per_step: float | None
    target: dict[str, Any]
    mllog: str | None
    imported: ImportedFrom | None  # a published MLPerf result's provenance
    sig: list[Any] = field(default_factory=list)  # what the run page depends on (pages._signature)
    mllog_copy: str | None = None  # r/<id>.mllog.txt when the named log exists beside the result
    mllog_note: str = ""  # why there is no log link, when the result names one
    samples_copy: str | None = None  # r/<id>.samples.png: a diffusion run's sample grid, beside its result
    month: str = ""  # UTC "YYYY-MM" of started_at: the month page that lists the run
    sub_month: str = ""  # the month of its submission (of the submission's newest seed)
    rowid: int = -1  # where the index holds its Result (-1: the file walk holds it)
    synthetic: bool = False  # it read `data prepare --synthetic` files: labelled, never on a leaderboard
    variant: str = ""  # the spec's named variant it ran (`--variant tiny`): labelled, off the leaderboards
    loaded: bool = False  # measured on a loaded host (suite.results.conditions): labelled, off the leaderboards
    goodput: str | None = None  # the index's `goodput` column (suite/site/goodput_history.py reads it)

    @classmethod
    def of(cls, root: Path, values: Sequence[Any]) -> RunRow:
        """A row from the ROW_COLUMNS values of the index (or of suite.results.index.rows.row_of on a Result)."""
        rel, source, run_id, seed, status, started, *rest, host_load, goodput = values
        rid = short_hash(rel, 16)
        target = target_of_column(rest[-5])
        when = datetime.fromisoformat(started)
        rr = cls(root, rel, f"r/{rid}.html", f"r/{rid}.json", source, run_id, seed, status, when, *rest[:-5],
                 target, rest[-4], imported_of(rest[-3]))
        rr.month = month_of(when)
        rr.synthetic, rr.variant, rr.loaded = bool(rest[-2]), rest[-1] or "", bool(host_load)
        rr.goodput = goodput
        return rr

    @classmethod
    def of_result(cls, root: Path, rel: str, r: Result) -> RunRow:
        """The same row from a full Result (the file walk): the index's own row function, so both agree."""
        from suite.results.index.rows import RUN_NAMES, row_of

        run = dict(zip(RUN_NAMES, row_of(rel, "", r, with_json=False)[0], strict=True))
        return cls.of(root, [run[c] for c in ROW_COLUMNS])

    @property
    def path(self) -> Path:
        """The result file (made when asked: a Path per run cost 9 µs of every build's 250,000 rows)."""
        return self.root / self.rel

    @property
    def reached(self) -> bool:
        return self.status == "reached" and self.time_to_target_s is not None

    def tta(self) -> float:
        return tta_of(self.status, self.time_to_target_s)

    def steps(self) -> float:
        """Steps to target, infinite when the target was not reached (RunFigures.steps)."""
        return float(self.steps_to_target) if self.reached and self.steps_to_target is not None else math.inf

    @property
    def sha(self) -> str:
        return self.git_sha or "unknown"

    @property
    def sub_key(self) -> tuple[str, ...]:
        """The submission the run belongs to: workload, spec hash, hardware, backend, precision, commit, synthetic."""
        return (self.workload, self.spec_hash, self.hardware, self.backend, self.precision, self.git_sha or "unknown",
                ("synthetic" if self.synthetic else "") + (" loaded" if self.loaded else ""), *published_key(self.imported))

    @property
    def order(self) -> tuple[str, ...]:
        """Where the result file sorts among the others (results.load_results's order): every tie between two
        runs or submissions is broken by it, so a build that reads some rows sorts them as one that reads all."""
        return path_key(self.rel)


def path_key(rel: str) -> tuple[str, ...]:
    return tuple(rel.split("/"))


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


@dataclass
class Submission(Reference):
    workload: str
    spec_hash: str
    hardware: str
    backend: str
    precision: str
    sha: str
    runs: list[RunRow]
    agg: Aggregate = field(init=False)
    _latest: RunRow = field(init=False, repr=False)
    order: tuple[str, ...] = field(init=False, repr=False)  # its first result file's place (RunRow.order)

    def __post_init__(self) -> None:
        self.order = min(rr.order for rr in self.runs)
        self.runs.sort(key=lambda rr: (rr.seed, rr.started_at, rr.order))
        self.agg = aggregate(cast(list[RunFigures], self.runs))  # the one aggregation (suite.results.stats)
        self._latest = max(self.runs, key=lambda r: r.started_at)  # the runs do not change after this

    def summary(self) -> SubSummary:
        a = self.agg
        return SubSummary(self.series, self.timestamp, "/".join(self.order), self.sha, a.tta_olympic_s,
                          a.mfu_median, a.reached, a.runs, goodput_history.mean_parts(self.runs))

    @property
    def series(self) -> str:
        return self.reference_series or (f"{self.hardware} · {self.backend} · {self.precision}"
                                         + (" · synthetic data" if self.synthetic else "")
                                         + (f" · variant {self.variant}" if self.variant else "")
                                         + (" · loaded host" if self.loaded else ""))

    @property
    def latest(self) -> RunRow:
        return self._latest

    @property
    def timestamp(self) -> float:
        return self._latest.started_at.timestamp()

    @property
    def algorithm(self) -> str:
        """The `--algo` label the runs were made with ('' for the spec's own optimizer)."""
        return self.latest.algorithm

    @property
    def dirty(self) -> bool:
        return any(rr.dirty for rr in self.runs)

    variant = property(lambda self: self.latest.variant)  # `--variant tiny` (it changes the spec hash: every seed's)
    synthetic = property(lambda self: any(rr.synthetic for rr in self.runs))  # read `data prepare --synthetic` files
    loaded = property(lambda self: any(rr.loaded for rr in self.runs))  # measured on a loaded host (issue 49)
    fault = property(lambda self: goodput_history.fault_figures(self.runs))  # a fault scenario's figures, or None

    @property
    def backend_version(self) -> str:
        return self.latest.backend_version

    @property
    def device(self) -> str:
        latest = self.latest
        return f"{latest.device_name} ×{latest.device_count}"

    @property
    def energy_to_target_j(self) -> float | None:
        return _median([r.energy_to_target_j for r in self.runs if r.energy_to_target_j is not None])

    @property
    def energy_j(self) -> float | None:
        return _median([r.energy_j for r in self.runs if r.energy_j is not None])


@dataclass(slots=True)
class SubSummary:
    """What the history charts show of one submission, kept in the site's manifest with its month: a month
    whose results are unchanged gives its submissions' points without a row being read again."""

    series: str
    timestamp: float
    first: str  # its first result file (Submission.order)
    sha: str
    tta_olympic_s: float
    mfu_median: float | None
    reached: int
    runs: int
    goodput_parts: dict[str, float] | None = None  # each wall-clock part's mean over its seeds (goodput_history)

    def to_json(self) -> list[Any]:
        return [self.series, self.timestamp, self.first, self.sha, self.tta_olympic_s, self.mfu_median, self.reached,
                self.runs, self.goodput_parts]

    @classmethod
    def of_json(cls, v: list[Any]) -> SubSummary:
        return cls(*v)

    @property
    def order(self) -> tuple[str, ...]:
        return path_key(self.first)


@dataclass(slots=True)
class Unit:
    """One month of one workload: its runs (by their start) and its submissions (by their newest seed's start).
    `checksum` covers every result file of both (path, archive, size, mtime): an unchanged checksum means an
    unchanged month page, unchanged run pages and unchanged submissions."""

    workload: str
    month: str
    checksum: str
    n_runs: int  # runs started in this month


@dataclass
class Workload:
    """A workload page's inputs: its months, the submissions the leaderboards and the convergence chart can show
    (the newest of each configuration, with every seed), its newest run, and for the months that are rendered
    their submissions and runs. The history charts' points (`history`) are filled only when the page renders."""

    name: str
    domain: str
    page: str
    units: list[Unit] = field(default_factory=list)  # oldest month first
    featured: list[Submission] = field(default_factory=list)  # by (timestamp, order)
    latest: RunRow | None = None
    baselines: list[Baseline] = field(default_factory=list)
    rcp: Any = None  # the newest reference convergence point (suite.results.rcp.RCP) beside the baselines
    month_subs: dict[str, list[Submission]] = field(default_factory=dict)  # months whose rows were read
    month_runs: dict[str, list[RunRow]] = field(default_factory=dict)
    history: list[SubSummary] = field(default_factory=list)

    @property
    def description(self) -> str:
        v = self.latest.variant if self.latest else ""  # the description names the full recipe, not its variant
        return (self.latest.description if self.latest else "") + (f" (newest run: variant {v}, off the leaderboards)" if v else "")

    @property
    def target(self) -> dict[str, Any]:
        return newest_target(self.latest, self.featured)

    @property
    def newest(self) -> str:
        return self.units[-1].month

    def leaderboards(self) -> list[tuple[str, list[Submission]]]:
        """Per spec hash (newest first): the latest submission of each (hardware, backend, precision), ranked; never
        a synthetic-data, a variant or a loaded-host submission (listed and labelled on the pages, not ranked)."""
        by_hash: dict[str, dict[tuple[str, str, str], Submission]] = defaultdict(dict)
        for s in (s for s in self.featured if not s.reference):  # published systems: with_references below
            if s.synthetic or s.variant or s.loaded:
                continue
            k = (s.hardware, s.backend, s.precision)
            cur = by_hash[s.spec_hash].get(k)
            if cur is None or s.timestamp > cur.timestamp:
                by_hash[s.spec_hash][k] = s
        # MLPerf ranks a submission that converged faster than its reference by its normalized time (stable: ties
        # keep rank()'s order)
        boards = [(h, sorted(rank(list(rows.values())), key=self.ranked_tta)) for h, rows in by_hash.items()]
        boards.sort(key=lambda hb: (-max(s.timestamp for s in hb[1]), hb[0]))
        return with_references(boards, self.featured, lambda subs: sorted(rank(subs), key=self.ranked_tta))

    def rcp_check(self, s: Submission) -> Any:
        """The convergence guard's verdict on a submission of the RCP's spec (rcp_guard.submission_check), or None."""
        if self.rcp is None or s.spec_hash != self.rcp.spec_hash or len(s.runs) < 3:
            return None
        from suite.compare import rcp_guard
        return rcp_guard.submission_check(self.rcp, [(r.status, r.steps_to_target) for r in s.runs],
                                          s.agg.tta_olympic_s)

    def ranked_tta(self, s: Submission) -> float:
        if s.reference:
            return s.mlperf_score_s  # type: ignore[return-value]
        chk = self.rcp_check(s)
        return chk["tta_normalized_s"] if chk and chk["faster"] else s.agg.tta_olympic_s

    def baseline_for(self, s: Submission) -> Baseline | None:
        """The baseline of the same hardware and backend, preferring one of the same spec hash."""
        same = [b for b in self.baselines if b.hardware == s.hardware and b.backend == s.backend]
        return next((b for b in same if b.spec_hash == s.spec_hash), same[0] if same else None)


def rank_key(s: Submission) -> tuple[float, float, str]:
    tta = s.agg.tta_olympic_s
    return (tta if not math.isnan(tta) else math.inf, -s.agg.success_rate, s.series)


def rank(subs: list[Submission]) -> list[Submission]:
    return sorted(subs, key=rank_key)


def submissions(rows: list[RunRow]) -> list[Submission]:
    """The submissions of `rows` (each with every seed among them), by (timestamp, order)."""
    groups: dict[tuple[str, ...], list[RunRow]] = defaultdict(list)
    for rr in rows:
        groups[rr.sub_key].append(rr)
    subs = [Submission(k[0], k[1], k[2], k[3], k[4], k[5], runs) for k, runs in groups.items()]
    subs.sort(key=lambda s: (s.timestamp, s.order))
    return subs

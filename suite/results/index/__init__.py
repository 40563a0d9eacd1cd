"""The results index: every reader's ONE way to the results (site, compare, promote, history, show, study).

`store` keeps an embedded DuckDB database beside the files (results/.index/results.duckdb) up to date;
`archive` packs old files into monthly zips the index still reads; this module is the query layer. Each
function updates the index first (only new or changed files are read), then answers from it. The DuckDB
calls live in store.py and here only: a lab that wants a shared store (a server database, object storage
with DuckDB's httpfs) changes these two files, nothing else.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from suite.results.index import store
from suite.results.index.store import IndexStoreError, UpdateReport, reading, update
from suite.results.record import Result, ResultError
from suite.results.tree import TrainbenchWarning

ENV_OFF = "TRAINBENCH_INDEX"  # TRAINBENCH_INDEX=0: readers walk the files as before (a fallback, and the tests' reference)


class IndexUnavailable(TrainbenchWarning):  # noqa: N818 - a warning, named for what the user sees
    """The index of a results folder cannot be used by this user; the files are read instead."""


def enabled(root: Path) -> bool:
    """Whether a reader reads `root` through its index, which this brings up to date. False for a single file,
    under TRAINBENCH_INDEX=0, and when the index cannot be updated here (a folder this user cannot write, another
    user's results.duckdb, a file named .index): then one IndexUnavailable warning says why, and the reader walks
    the files, which give the same answers, slower. Every reader (site, compare, promote, history, show) asks
    here, so they all fall back the same way; what they call next need not update again (refresh=False)."""
    if not root.is_dir() or os.environ.get(ENV_OFF, "1") in ("0", "off", "false", "no"):
        return False
    try:
        update(root)
    except IndexStoreError as e:
        warnings.warn(IndexUnavailable(f"{e.where}: cannot use the results index ({e.why}); reading the files "
                                       f"instead (set {ENV_OFF}=0 to skip the index without this warning)"),
                      stacklevel=2)
        return False
    return True


@dataclass
class Entry:
    """One indexed run: where it lives and the Result, validated when it was indexed."""

    path: Path  # root / rel: the loose file, or where it was before it was archived
    rel: str
    source: str  # '' for a loose file, else the archive (relative to the results folder) holding it
    result: Result


@dataclass
class Indexed:
    entries: list[Entry]
    errors: list[str]  # bad files, worded as results.load_results words them
    update: UpdateReport | None = None

    @property
    def results(self) -> list[tuple[Path, Result]]:
        return [(e.path, e.result) for e in self.entries]


def _display(root: Path, rel: str, source: str) -> str:
    return str(root / rel) if not source else f"{root / source}:{rel}"


def _path_key(rel: str) -> tuple[str, ...]:
    return tuple(rel.split("/"))  # the order of sorted(Path): by parts, as load_results returns files


def _bad_files(con: Any, root: Path, strict: bool) -> list[str]:
    """The bad files, named as results.load_results names them, in its order; under strict the first raises."""
    errors = sorted(con.execute("SELECT path, source, error FROM files WHERE error IS NOT NULL").fetchall(),
                    key=lambda row: _path_key(row[0]))
    if strict and errors:
        rel, source, error = errors[0]
        raise ResultError(f"{_display(root, rel, source)}: {error}")
    return [f"{_display(root, rel, source)}: {e}" for rel, source, e in errors]


def load(root: Path, strict: bool = False, where: str = "", params: Sequence[Any] = (), refresh: bool = True
         ) -> Indexed:
    """Every valid run under root (optionally only the `runs` rows matching the SQL `where`), in
    results.load_results's order, with the bad files named; under strict a bad file raises ResultError.
    refresh=False: the caller has just updated the index (`enabled`)."""
    report = update(root) if refresh else None
    with reading(root, refresh=False) as con:
        errors = _bad_files(con, root, strict)
        rows = con.execute(f"SELECT path, source, result FROM runs {'WHERE ' + where if where else ''}",
                           list(params)).fetchall()
    rows.sort(key=lambda row: _path_key(row[0]))
    entries = [Entry(root / rel, rel, source, Result.model_validate_json(text)) for rel, source, text in rows]
    return Indexed(entries, errors, report)


# ---- the site: typed rows for every page, the full Result only for the run pages that are rendered ----------


# A run's month (UTC) and its submission's (the month of the submission's newest seed), in SQL: what
# suite.site.months.walk_catalog computes from every row of the file walk.
_MONTH = "strftime(make_timestamp(CAST(round(r.started_ts * 1000000) AS BIGINT)), '%Y-%m')"
_SUB = "r.workload, r.spec_hash, r.hardware, r.backend, r.precision, coalesce(r.git_sha, 'unknown')"
_KEY = "workload, spec_hash, hardware, backend, precision, sha, synthetic_data, loaded_host"  # RunRow.sub_key
_RUNS = (f"SELECT r.rowid AS rid, r.*, {_MONTH} AS month, coalesce(r.git_sha, 'unknown') AS sha, f.size, f.mtime_ns, "
         "r.host_load IS NOT NULL AS loaded_host "  # measured on a loaded host: off the leaderboards (issue 49)
         "FROM runs r JOIN files f USING (path)")
_SUBS = f"SELECT {_KEY}, max(started_ts) AS ts, max(month) AS sub_month, min(month) AS first_month FROM s GROUP BY ALL"
# the checksum of every (workload, month): members are the runs started in it (role 0) and the earlier seeds of its
# submissions (role 1); an md5 a member, summed (order-free: no sort, no long string); suite.site.months.checksum
_UNITS = (f"WITH s AS ({_RUNS}), sub AS ({_SUBS}), late AS (SELECT s.workload, sub.sub_month AS unit, 1 AS role, "
          f"s.path, s.source, s.size, s.mtime_ns FROM s JOIN sub USING ({_KEY}) WHERE sub.first_month <> sub.sub_month "
          "AND s.month <> sub.sub_month), u AS (SELECT workload, month AS unit, 0 AS role, path, source, size, mtime_ns "
          "FROM s UNION ALL SELECT * FROM late), m AS (SELECT *, concat_ws(chr(31), role, path, source, size, mtime_ns) "
          "AS member FROM u) SELECT workload, unit, count(*) FILTER (WHERE role = 0), count(*), "
          "sum(md5_number_lower(member)), sum(md5_number_upper(member)) FROM m GROUP BY workload, unit "
          "ORDER BY workload, unit")


_BEST = ("SELECT * FROM (SELECT *, max(ts) OVER (PARTITION BY workload, spec_hash, hardware, backend, precision, "
         "synthetic_data, loaded_host) AS lb, max(ts) OVER (PARTITION BY workload, hardware, backend, precision, synthetic_data, "
         "loaded_host) AS cfg "
         "FROM sub0) WHERE ts = lb OR ts = cfg")


def _rows_sql(columns: Sequence[str], where: str = "TRUE", best: bool = False, pre: str = "") -> str:
    """`columns`, size, mtime_ns, sub_month and row id of the runs matching `where`; `best`: only those of the
    newest submission of each leaderboard row (workload, spec hash, hardware, backend, precision) or each
    configuration (workload, hardware, backend, precision), ties included. `pre`: CTEs before them."""
    cols = ", ".join(f"s.{c}" for c in columns)
    subs = f"sub0 AS ({_SUBS}), sub AS ({_BEST})" if best else f"sub AS ({_SUBS})"
    return (f"WITH {pre}s AS ({_RUNS}), {subs} SELECT {cols}, s.size, s.mtime_ns, sub.sub_month, s.rid "
            f"FROM s JOIN sub USING ({_KEY}) WHERE {where}")


@dataclass
class SiteOverview:
    """What a site build reads of every run, in a few aggregate rows: the months of every workload with their
    checksums (suite.site.months.checksum, computed here in SQL), the featured runs (every seed of the newest
    submission of each leaderboard row and of each configuration), each workload's domain, and the totals."""

    units: list[tuple[str, str, int, str]]  # workload, month, runs started in it, checksum
    featured: list[tuple[Any, ...]]  # `columns`, then size, mtime_ns, sub_month, row id
    domains: dict[str, str]
    n_results: int
    hardware: list[str]
    backends: list[str]
    errors: list[str]
    update: UpdateReport


def site_overview(root: Path, columns: Sequence[str], strict: bool = False, refresh: bool = True) -> SiteOverview:
    """The index's side of suite.site.months.walk_catalog, plus the bad files (strict: the first raises)."""
    report = update(root) if refresh else UpdateReport(store.db_path(root))
    with reading(root, refresh=False) as con:
        errors = _bad_files(con, root, strict)
        units = [(w, m, n, f"{members}.{lo}.{hi}") for w, m, n, members, lo, hi in con.execute(_UNITS).fetchall()]
        featured = con.execute(_rows_sql(columns, best=True)).fetchall()
        domains = dict(con.execute("SELECT workload, arg_min(domain, replace(path, '/', chr(1))) FROM runs "
                                   "GROUP BY workload").fetchall())
        n = con.execute("SELECT count(*) FROM runs").fetchone()
        hardware = [h for (h,) in con.execute("SELECT DISTINCT hardware FROM runs ORDER BY hardware").fetchall()]
        backends = [b for (b,) in con.execute("SELECT DISTINCT backend FROM runs ORDER BY backend").fetchall()]
    featured.sort(key=lambda row: _path_key(row[0]))
    return SiteOverview(units, featured, domains, n[0] if n else 0, hardware, backends, errors, report)


def site_unit_rows(root: Path, columns: Sequence[str], units: Sequence[tuple[str, str]]) -> list[tuple[Any, ...]]:
    """`columns`, size, mtime_ns, sub_month and row id of every run started in one of the (workload, month) units
    or belonging to a submission of one, in results.load_results's order."""
    if not units:
        return []
    sql = _rows_sql(columns, "EXISTS (SELECT 1 FROM q WHERE q.w = s.workload AND (q.m = s.month OR q.m = sub.sub_month))",
                    pre="q AS (SELECT unnest($1::VARCHAR[]) AS w, unnest($2::VARCHAR[]) AS m), ")
    with reading(root, refresh=False) as con:
        rows = con.execute(sql, [[w for w, _ in units], [m for _, m in units]]).fetchall()
    rows.sort(key=lambda row: _path_key(row[0]))
    return rows


def results_of(root: Path, rels: Sequence[str], rowids: Sequence[int] = (), con: Any = None) -> dict[str, Result]:
    """The full Result of each run named (by its path under the results folder), from the index. `rowids` (the
    runs' row ids as site_unit_rows gave them) find the rows without a scan of every path and result: a lookup
    by path decompressed the result column around every match, ~0.4 s a chunk of 500 at 250,000 runs. A row
    whose id no longer holds its path (the index was updated since) is found by its path. `con`: an open
    connection (site.pages.run reads many chunks through one)."""
    if con is None:
        with reading(root, refresh=False) as own:
            return results_of(root, rels, rowids, own)
    found: dict[str, str] = {}
    if rowids:
        want = set(rels)
        found = {p: t for p, t in con.execute("SELECT path, result FROM runs WHERE rowid IN "
                                              "(SELECT unnest($1::BIGINT[]))", [list(rowids)]).fetchall() if p in want}
    missing = [rel for rel in rels if rel not in found]
    if missing:
        found.update(con.execute("SELECT path, result FROM runs WHERE path IN (SELECT unnest($1::VARCHAR[]))",
                                 [missing]).fetchall())
    return {rel: Result.model_validate_json(text) for rel, text in found.items()}


def curves(root: Path, requests: Sequence[tuple[Sequence[str], str | None]]
           ) -> list[dict[str, list[tuple[int, float, float]]]]:
    """For each request (runs named by path, a metric): (step, elapsed_s, value) of the metric for each run, in
    the order of its eval curve. One query for all the requests: each scan of the series table (tens of millions
    of rows at 250,000 runs) costs ~0.1 s, and a build asks for every workload page's curves at once."""
    outs: list[dict[str, list[tuple[int, float, float]]]] = [{rel: [] for rel in rels} for rels, _ in requests]
    wanted = sorted({(rel, metric) for rels, metric in requests if metric for rel in rels})
    if not wanted:
        return outs
    with reading(root, refresh=False) as con:
        rows = con.execute("SELECT s.path, s.metric, s.step, s.elapsed_s, s.value FROM series s JOIN (SELECT "
                           "unnest($1::VARCHAR[]) AS path, unnest($2::VARCHAR[]) AS metric) q USING (path, metric) "
                           "ORDER BY s.path, s.metric, s.i", [[r for r, _ in wanted], [m for _, m in wanted]]).fetchall()
    found: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
    for rel, metric, step, elapsed, value in rows:
        found.setdefault((rel, metric), []).append((step, elapsed, value))
    for out, (rels, metric) in zip(outs, requests, strict=True):
        if metric:
            for rel in rels:
                out[rel] = list(found.get((rel, metric), ()))
    return outs


def bad_files(root: Path, refresh: bool = True) -> list[str]:
    """Every bad file the index skipped, named as load_results names it, in path order."""
    rows = query(root, "SELECT path, source, error FROM files WHERE error IS NOT NULL", refresh=refresh)
    return [f"{_display(root, rel, source)}: {e}" for rel, source, e in sorted(rows, key=lambda r: _path_key(r[0]))]


def query(root: Path, sql: str, params: Sequence[Any] = (), refresh: bool = True) -> list[tuple[Any, ...]]:
    """Rows of a read-only SQL query over the tables `runs`, `series` and `files` (see store.py)."""
    with reading(root, refresh=refresh) as con:
        return con.execute(sql, list(params)).fetchall()


# ---- compare and promote: the figures of each run, straight from typed columns ------------------------


def records(root: Path, where: str = "", params: Sequence[Any] = (), refresh: bool = True) -> tuple[list[Any], list[str]]:
    """baselines.RunRecord of every valid run (matching `where`) and the bad files: what
    baselines.load_paths gives compare and promote, without reading a file that is already indexed."""
    from suite.results.runfiles import RunRecord, SideKey
    from suite.results.stats import figures_from_json

    with reading(root, refresh=refresh) as con:
        errors = con.execute("SELECT path, source, error FROM files WHERE error IS NOT NULL").fetchall()
        rows = con.execute(
            "SELECT path, source, hardware, workload, backend, spec_hash, workload_version, noise_floor, git_dirty, "
            f"comparison, imported, figures FROM runs {'WHERE ' + where if where else ''}",
            list(params)).fetchall()
    rows.sort(key=lambda row: _path_key(row[0]))
    out = []
    for rel, source, hw, wl, be, spec_hash, wv, nf, dirty, comparison, imported, figures in rows:
        out.append(RunRecord(_display(root, rel, source), SideKey(hw, wl, be), spec_hash, wv, nf,
                             figures_from_json(figures), bool(dirty), json.loads(comparison) if comparison else {},
                             _imported_system(imported)))
    bad = [f"{_display(root, rel, source)}: {e}" for rel, source, e in sorted(errors, key=lambda r: _path_key(r[0]))]
    return out, bad


def _imported_system(column: str | None) -> str | None:
    if not column:
        return None
    data = json.loads(column)
    return f"{data['submitter']}/{data['system']}"


def compare_inputs(root: Path, strict: bool, validate: bool, refresh: bool = True) -> Any:
    """runfiles.Loaded for one results folder, the way baselines.load_paths reads it: valid runs from the
    index; every file the index could not take as a result (a baseline file, a bad file) read again by
    runfiles.read_file, so baselines are recognised and errors are worded as compare words them."""
    from suite.results.baseline_schema import Baseline
    from suite.results.noise_floor import NoiseFloor
    from suite.results.rcp import RCP
    from suite.results.runfiles import Loaded, read_file

    recs, _ = records(root, refresh=refresh)
    bad = query(root, "SELECT path, source, error FROM files WHERE error IS NOT NULL", refresh=False)
    baselines: list[tuple[str, Any]] = []
    floors: list[Any] = []
    rcps: list[Any] = []
    errors: list[str] = []
    for rel, source, error in sorted(bad, key=lambda r: _path_key(r[0])):
        if source:  # a bad member of an archive: only the index's message exists
            if strict:
                raise ResultError(f"{_display(root, rel, source)}: {error}")
            errors.append(f"{_display(root, rel, source)}: {error}")
            continue
        try:
            item = read_file(root / rel, validate)
        except ResultError as e:
            if strict:
                raise
            errors.append(str(e))
            continue
        if isinstance(item, Baseline):
            baselines.append((str(root / rel), item))
        elif isinstance(item, NoiseFloor):  # a measured A/A floor (trainbench calibrate) beside the baselines
            floors.append(item)
        elif isinstance(item, RCP):  # a reference convergence point (trainbench baseline rcp)
            rcps.append(item)
        else:  # changed since it was indexed: read now, indexed by the next update
            recs.append(item)
    n_files = query(root, "SELECT count(*) FROM files", refresh=False)[0][0]
    return Loaded(recs, baselines, errors, n_files, floors, rcps)


def nights(root: Path, refresh: bool = True) -> list[str]:
    """The UTC days that have runs, oldest first."""
    return [d for (d,) in query(root, "SELECT DISTINCT day FROM runs ORDER BY day", refresh=refresh)]


# ---- history: every series' olympic time to target per commit ----------------------------------------


@dataclass
class HistoryPoint:
    git_sha: str
    first_started_at: datetime
    runs: int
    reached: int
    tta_olympic_s: float  # inf when fewer than the olympic count reached (a miss is infinitely slow)


@dataclass
class Series:
    workload: str
    hardware: str
    backend: str
    precision: str
    spec_hash: str
    points: list[HistoryPoint] = field(default_factory=list)


def history(root: Path, workload: str | None = None, refresh: bool = True) -> list[Series]:
    """Per (workload, hardware, backend, precision, spec hash): one point per commit, oldest first, each the
    olympic mean of its seeds' times to target (suite.results.stats, the one aggregation)."""
    from suite.results.stats import olympic_mean

    where, params = ("WHERE workload = ?", [workload]) if workload else ("", [])
    rows = query(root, "SELECT workload, hardware, backend, precision, spec_hash, coalesce(git_sha, 'unknown'), "
                       "min(started_ts), count(*), count(*) FILTER (WHERE status = 'reached' AND tta_s IS NOT NULL), "
                       "list(CASE WHEN status = 'reached' AND tta_s IS NOT NULL THEN tta_s END) "
                       f"FROM runs {where} GROUP BY ALL ORDER BY ALL", params, refresh=refresh)
    series: dict[tuple[str, ...], Series] = {}
    for wl, hw, be, prec, spec, sha, first, n, reached, ttas in rows:
        s = series.get((wl, hw, be, prec, spec))
        if s is None:
            s = series[(wl, hw, be, prec, spec)] = Series(wl, hw, be, prec, spec)
        values = [math.inf if t is None else float(t) for t in ttas]
        s.points.append(HistoryPoint(sha, datetime.fromtimestamp(first, UTC), n, reached, olympic_mean(values)))
    for s in series.values():
        s.points.sort(key=lambda p: p.first_started_at)
    return list(series.values())


def grouped(root: Path) -> dict[str, list[Entry]]:
    """Entries by workload (a convenience for study and show)."""
    out: dict[str, list[Entry]] = defaultdict(list)
    for e in load(root).entries:
        out[e.result.workload].append(e)
    return out

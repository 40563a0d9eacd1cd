"""results/ (+ baselines/, + compare JSON) -> a static leaderboard site in site/_build: a pure function of its inputs.

The output is plain files with relative links (works from file:// and any static host), no CDN and no
server; the same inputs give byte-identical output. Every string from a result goes through jinja2
autoescape and is placed only in text or double-quoted attributes; every link is built here from hashes
and slugs, never taken from a result. Corrupt result files are named and skipped (or fail under strict).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import http.server
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.results import rcp as rcp_files
from suite.results.record import Result, load_results
from suite.site import months as site_months
from suite.site.baselines import load_baselines
from suite.site.data import ROW_COLUMNS, RunRow, Unit, Workload
from suite.site.job import (
    STATIC_DIR,
    Job,
    ResultReader,
    Site,
    code_version,
    copy_if_changed,
    environment,
    read_manifest_all,
    signature,
    worker_count,
)
from suite.site.months import digest, walk_catalog, workloads_of
from suite.site.output import (
    MARKER,
    SiteError,
    Txn,
    check_out_apart,
    collector_paused,
    locked,
    previous_files,
    prune,
    read_marker,
    transaction,
)
from suite.site.pages import whole_site_pages
from suite.site.pages.compare import CompareView, compare_view
from suite.site.pages.run import run_pages
from suite.site.pages.study import StudyView, study_view
from suite.site.pages.workload import workload_pages
from suite.site.render import CurveSource, result_curve


@dataclass
class BuildReport:
    out: Path
    index: Path
    results: int
    workloads: int
    pages: int
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    index_bytes: int = 0
    phases_s: dict[str, float] = field(default_factory=dict)  # wall seconds: load, group, plan, run_pages, other_pages
    rendered: int = 0  # pages rendered this time (the others were kept: their inputs had not changed)


# ---- the build ------------------------------------------------------------------------------------------


@dataclass
class _Inputs:
    """The runs as the site plans them: every workload's months (with checksums) and featured runs, a way to read
    the rows of some months, the bad files, and where each page's full Result and curves come from."""

    units: list[Unit]
    featured: list[RunRow]
    domains: dict[str, str]
    n_results: int
    hardware: list[str]
    backends: list[str]
    errors: list[str]
    rows_of: Callable[[list[tuple[str, str]]], list[RunRow]]
    fetch: ResultReader
    curves: CurveSource


def _row(root: Path, values: Sequence[Any]) -> RunRow:
    """A RunRow from ROW_COLUMNS, size, mtime_ns, sub_month, row id (suite.results.index.site_overview / site_unit_rows)."""
    rr = RunRow.of(root, values[:-4])
    rr.sig = signature(rr, values[-4], values[-3])
    rr.sub_month, rr.rowid = values[-2], values[-1]
    return rr


@contextlib.contextmanager
def _index_results(results: Path) -> Iterator[Callable[[list[RunRow]], dict[str, Result]]]:
    """Read Results from the index through one connection (opening one costs ~20 ms)."""
    from suite.results import index
    from suite.results.index import store as index_store

    with index_store.reading(results, refresh=False) as con:
        yield lambda rows: index.results_of(results, [rr.rel for rr in rows], [rr.rowid for rr in rows], con=con)


def _load(results: Path, strict: bool, use_index: bool | None) -> _Inputs:
    """Through the index when it is on (aggregates; typed rows only of the months that are rendered; a Result
    only for a run page that is rendered), else by walking the files (every Result read, its row made by the
    index's own row function, the months' checksums computed as the index computes them)."""
    from suite.results import index

    root = results if results.is_dir() else results.parent
    if use_index if use_index is not None else index.enabled(results):  # enabled(): updated, or warned and off
        ov = index.site_overview(results, ROW_COLUMNS, strict=strict, refresh=use_index is not None)
        with collector_paused():
            featured = [_row(root, v) for v in ov.featured]

        def rows_of(units: list[tuple[str, str]]) -> list[RunRow]:
            found = index.site_unit_rows(results, ROW_COLUMNS, units)
            with collector_paused():
                return [_row(root, v) for v in found]

        return _Inputs([Unit(w, m, c, n) for w, m, n, c in ov.units], featured, ov.domains, ov.n_results, ov.hardware,
                       ov.backends, ov.errors, rows_of, functools.partial(_index_results, results),
                       lambda asks: index.curves(results, [([rr.rel for rr in runs], m) for runs, m in asks]))
    loaded = load_results(results, strict=strict)
    full: dict[str, Result] = {}
    rows = []
    for path, r in loaded.results:
        rel = path.relative_to(root).as_posix()
        full[rel] = r
        rr = RunRow.of_result(root, rel, r)
        st = path.stat()
        rr.sig = signature(rr, st.st_size, st.st_mtime_ns)
        rows.append(rr)
    units, featured = walk_catalog(rows)
    domains: dict[str, str] = {}
    for rr in rows:
        domains.setdefault(rr.workload, rr.domain)

    def walk_rows_of(wanted: list[tuple[str, str]]) -> list[RunRow]:
        keys = set(wanted)
        return [rr for rr in rows if (rr.workload, rr.month) in keys or (rr.workload, rr.sub_month) in keys]

    return _Inputs(units, featured, domains, len(rows), sorted({rr.hardware for rr in rows}),
                   sorted({rr.backend for rr in rows}), loaded.errors, walk_rows_of,
                   lambda: contextlib.nullcontext(lambda rrs: {rr.rel: full[rr.rel] for rr in rrs}),
                   lambda asks: [{rr.rel: result_curve(full[rr.rel], m) for rr in runs} for runs, m in asks])


def _prepare_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise SiteError(f"--out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
        raise SiteError(f"--out {out}: folder is not empty and was not built by `trainbench site build` "
                        f"(no {MARKER}); choose another --out or empty it")
    for sub in ("w", "r", "compare", "study", "static", site_months.UNITS_DIR):
        (out / sub).mkdir(parents=True, exist_ok=True)


def build_site(
    results: Path,
    out: Path,
    baselines: Path | None = None,
    compare: Sequence[Path] = (),
    strict: bool = False,
    jobs: int | None = None,
    studies: Sequence[Path] = (),
    use_index: bool | None = None,
) -> BuildReport:
    """Render the whole site into `out`; return what was built and which input files were skipped.

    Files are rewritten in place and stale ones pruned afterwards (a fresh copy of 10,000 run pages costs
    seconds, deleting the old ones first as many again). `jobs` > 1 renders run pages in forked workers.
    Results are read through the index (suite.results.index, updated first) unless `use_index` is False or
    TRAINBENCH_INDEX=0; both give the same site, byte for byte.
    """
    t0 = time.perf_counter()
    if not results.exists():
        raise SiteError(f"--results {results}: no such folder (run `trainbench run ...` first, or point at one)")
    check_out_apart(out, {"--results": results, "--baselines": baselines})
    with locked(out):  # concurrent builds into one --out take turns (new folder or existing site alike)
        return _build_locked(results, out, baselines, compare, strict, jobs, studies, use_index, t0)


def _build_locked(results: Path, out: Path, baselines: Path | None, compare: Sequence[Path], strict: bool,
                  jobs: int | None, studies: Sequence[Path], use_index: bool | None, t0: float) -> BuildReport:
    if out.exists() and not out.is_dir():
        raise SiteError(f"--out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
        raise SiteError(f"--out {out}: folder is not empty and was not built by `trainbench site build` "
                        f"(no {MARKER}); choose another --out or empty it")
    for c in compare:
        if not c.is_file():
            raise SiteError(f"--compare {c}: no such file")
    for st in studies:
        if not (st.is_file() or (st / "study.json").is_file()):
            raise SiteError(f"--study {st}: no such file (give a study.json or the folder `trainbench study` wrote)")
    inputs = _load(results, strict, use_index)  # strict: ResultError naming the file propagates
    phases = {"load": time.perf_counter() - t0}
    base, base_errors = load_baselines(baselines)
    if strict and base_errors:
        raise SiteError(base_errors[0])
    root = results if results.is_dir() else results.parent
    with collector_paused():  # submissions: long-lived objects, no garbage cycles
        workloads = workloads_of(inputs.units, inputs.featured, inputs.domains)
    rcps, rcp_errors = rcp_files.load_rcps(baselines)
    base_errors += rcp_errors
    for w in workloads:
        w.baselines = [b for b in base if b.workload == w.name]
        w.rcp = max((r for r in rcps if r.benchmark == w.name), key=lambda r: (r.made_at, r.source), default=None)
    views: list[CompareView] = [compare_view(p, i) for i, p in enumerate(compare)]
    study_views: list[StudyView] = [study_view(p, i) for i, p in enumerate(studies)]
    view_errors = [v.error for v in views if v.error] + [v.error for v in study_views if v.error]
    if strict and view_errors:
        raise SiteError(view_errors[0])

    skipped = [_relative_error(e, root) for e in inputs.errors + base_errors]
    phases["group"] = time.perf_counter() - t0 - phases["load"]
    try:
        with transaction(out) as txn:
            n_pages = _build_into(txn, workloads, views, study_views, skipped, jobs, phases, root, inputs)
    finally:
        gc.unfreeze()  # the build froze its rows out of the collector (pages.run_pages)
    index = out / "index.html"
    return BuildReport(out=out, index=index, results=inputs.n_results, workloads=len(workloads),
                       pages=n_pages, skipped=skipped,
                       rendered=phases.pop("rendered_pages", 0),
                       seconds=time.perf_counter() - t0, index_bytes=index.stat().st_size,
                       phases_s={k: round(v, 3) for k, v in phases.items()})


def _build_into(txn: Txn, workloads: list[Workload], views: list[CompareView], study_views: list[StudyView],
                skipped: list[str], jobs: int | None, phases: dict[str, float], root: Path, inputs: _Inputs) -> int:
    """Render every page whose inputs changed into the site folder, write the manifest, prune; the count of
    pages the site has. A month whose checksum (and the logs its pages wait for) is as the last build recorded
    keeps its run pages and history points without its rows being read (suite/site/months.py); a workload or
    month page whose digest is unchanged is kept unrendered."""
    out = txn.out
    _prepare_out(out)
    version = code_version()
    marker = read_marker(out)
    old = read_manifest_all(out, version, marker)
    old_units: dict[str, Any] = old.get("units", {})
    common = digest(version, [(v.page, v.name) for v in views], [(v.page, v.name) for v in study_views])
    t1 = time.perf_counter()
    plan = site_months.plan(workloads, old_units, old.get("pages", {}), common, root, out)
    rows = inputs.rows_of(plan.needed())
    site_months.attach(plan, rows)
    phases["plan"] = time.perf_counter() - t1
    gc.freeze()  # the rows and the manifest live to the end: out of every later collection (unfrozen at the end)
    # the run pages of the months that changed: each kept if its signature is as its month's file recorded
    stale = [up for up in plan.units if not up.fresh]
    cache: dict[str, Any] = {}
    arrived: set[str] = set()
    olds: dict[tuple[str, str], dict[str, Any] | None] = {}
    for up in stale:
        olds[up.key] = entries = site_months.old_runs(out, up.old)
        cache.update(entries or {})
        arrived.update(x[0] for x in (up.old[2] if up.old else []) if isinstance(x, list) and len(x) == 3
                       and site_months.log_beside(root, x[1], x[2]))
    job = Job(environment(), out, {"compares": views, "studies": study_views},
              [(rr, up.w) for up in stale for rr in up.w.month_runs[up.unit.month]], cache, arrived, root, inputs.fetch)
    t1 = time.perf_counter()
    run_files, manifest, rendered = run_pages(job, worker_count(jobs, len(job.runs)))
    phases["run_pages"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    written = set(run_files)
    units_out: dict[str, dict[str, Any]] = {}
    n_pages = 0
    previous = previous_files(out, marker)
    for up in plan.units:
        if up.fresh:
            entry = up.old
        else:
            runs = {rr.page: manifest[rr.page] for rr in up.w.month_runs[up.unit.month]}
            entry = site_months.unit_entry(out, up, runs, up.w.month_subs[up.unit.month])
            written.update(f for e in runs.values() for f in e["files"])
            previous.update(site_months.files_of(olds[up.key]))
        assert entry is not None
        written.add(entry[4])
        units_out.setdefault(up.unit.workload, {})[up.unit.month] = entry
        n_pages += entry[1]
    # months (or workloads) that are gone: their run pages are pruned; so are all the last build's run pages
    # that this one did not write when it was built by other site code (whose months were not read above)
    last_units = marker.get("units") if isinstance(marker, dict) else None
    last: dict[str, Any] = last_units if isinstance(last_units, dict) else {}
    for name, months in last.items():
        for month, entry in months.items() if isinstance(months, dict) else ():
            if (not old or month not in units_out.get(name, {})) and site_months.valid(entry):
                previous.update(site_months.files_of(site_months.old_runs(out, entry)))
    domains: dict[str, list[Workload]] = {}
    for w in workloads:
        domains.setdefault(w.domain, []).append(w)
    latest = max((w.latest.started_at for w in workloads if w.latest), default=None)
    files, cp, n = workload_pages(job, plan, inputs.curves, old.get("cp", {}))
    written.update(files)
    rendered += n
    for asset in sorted(STATIC_DIR.iterdir()):
        if asset.is_file():
            copy_if_changed(asset, out / "static" / asset.name)
            written.add(f"static/{asset.name}")
    # the pages over the whole results (suite/site/pages/: compare reports, studies, ..., the index last)
    rounds = sorted({s.round for wls in domains.values() for w in wls for _, subs in w.leaderboards() for s in subs})
    site = Site(workloads=workloads, domains=domains, compares=views, studies=study_views, skipped=skipped,
                n_results=inputs.n_results, hardware=inputs.hardware, backends=inputs.backends, latest=latest,
                rounds=rounds)
    n_whole = 0
    for page in whole_site_pages():
        files = page.render(job, site)
        written.update(files)
        n_whole += len(files)
    phases["rendered_pages"] = rendered + n_whole
    # the marker doubles as the manifest: the months (their run pages, history points and checksums), the
    # digests of the workload and month pages, the change-point tests, and every other file this build wrote
    # (the only files a later build may prune: a month's run pages are listed in its entry)
    prune(out, written, previous)
    top = sorted(f for f in written if not f.startswith("r/"))
    txn.commit(json.dumps({"built_by": "trainbench site build", "code": version, "pages": dict(sorted(plan.digests.items())),
                           "units": {k: dict(sorted(v.items())) for k, v in sorted(units_out.items())},
                           "cp": dict(sorted(cp.items())), "files": top}, separators=(",", ":")) + "\n")
    phases["other_pages"] = time.perf_counter() - t1
    return n_pages + sum(1 for f in top if f.endswith(".html"))


def _relative_error(message: str, root: Path) -> str:
    """Errors name files relative to the results folder, so a published site does not leak build paths."""
    for prefix in (str(root.resolve()) + os.sep, str(root) + os.sep):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def serve(folder: Path, port: int = 8000, announce: Callable[[str], Any] = print) -> None:
    """Serve a built site on 127.0.0.1 only (a preview, never a public server) until interrupted."""
    if not (folder / "index.html").is_file():
        raise SiteError(f"{folder}: no index.html; run `trainbench site build --out {folder}` first")
    handler = functools.partial(_QuietHandler, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as httpd:
        real_port = httpd.server_address[1]
        announce(f"serving {folder} at http://127.0.0.1:{real_port}/ (Ctrl-C to stop)")
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        pass

"""results/ (+ baselines/, + compare JSON) -> a static leaderboard site in site/_build: a pure function of its inputs.

The output is plain files with relative links (works from file:// and any static host), no CDN and no
server; the same inputs give byte-identical output. Every string from a result goes through jinja2
autoescape and is placed only in text or double-quoted attributes; every link is built here from hashes
and slugs, never taken from a result. Corrupt result files are named and skipped (or fail under strict).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import http.server
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from suite.fingerprint import load_warning
from suite.results import load_results
from suite.site.data import (
    CompareView,
    RunRow,
    StudyView,
    Workload,
    build_workloads,
    cell_text,
    compare_view,
    flatten,
    load_baselines,
    precision_of,
    short_hash,
    study_view,
)
from suite.site.render import (  # noqa: F401 - fmt_* and sort_value are re-exported for callers and tests
    MAX_CURVES,
    convergence_chart,
    eval_names,
    eval_rows,
    fmt_date,
    fmt_num,
    fmt_pct,
    fmt_s,
    history_charts,
    kv_rows,
    record_tables,
    run_charts,
    sort_value,
)

SITE_DIR = Path(__file__).resolve().parents[2] / "site"
MARKER = ".trainbench-site"  # a folder holding this file is ours to replace


class SiteError(Exception):
    """The site cannot be built; the message says which input or folder and what to do."""


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
    phases_s: dict[str, float] = field(default_factory=dict)  # wall seconds: load, run_pages, other_pages


def _env() -> jinja2.Environment:
    templates = SITE_DIR / "templates"
    if not (templates / "base.html").is_file():
        raise SiteError(f"{templates}: site templates are missing (is this a full checkout of the repository?)")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        autoescape=True,  # every template, whatever its name: results are untrusted text
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,  # one build, templates do not change: skip a stat per page
    )
    env.globals["inf"] = math.inf
    env.globals["load_warning"] = load_warning  # a run whose host was loaded says so on its page
    env.filters.update(s=fmt_s, pct=fmt_pct, num=fmt_num, date=fmt_date, sortv=sort_value, text=cell_text)
    return env


# ---- the build ------------------------------------------------------------------------------------------


def _safe_log_name(name: str) -> bool:
    return bool(name) and name == Path(name).name and name not in (".", "..") and "\\" not in name \
        and not name.startswith(".") and "\x00" not in name


def _attach_mllog(rr: RunRow, out: Path) -> None:
    """Copy the :::MLLOG file a result names, only when it is a plain file right beside the result."""
    name = rr.result.mllog
    if not name:
        return
    if not _safe_log_name(name):
        rr.mllog_note = "the log name in this result is not a plain file name; not linked"
        return
    src = rr.path.parent / name
    try:
        ok = src.is_file() and src.resolve().parent == rr.path.parent.resolve()
    except OSError:
        ok = False
    if not ok:
        rr.mllog_note = "the MLPerf log this result names is not beside it"
        return
    rr.mllog_copy = rr.page.removesuffix(".html") + ".mllog.txt"
    _copy_if_changed(src, out / rr.mllog_copy)


def _prepare_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise SiteError(f"--out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
        raise SiteError(f"--out {out}: folder is not empty and was not built by `trainbench site build` "
                        f"(no {MARKER}); choose another --out or empty it")
    for sub in ("w", "r", "compare", "study", "static"):
        (out / sub).mkdir(parents=True, exist_ok=True)


def _prune(out: Path, written: set[str]) -> None:
    """Delete what an earlier build wrote and this one did not (a result removed, a compare file dropped)."""
    for dirpath, _, files in os.walk(out):
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), out).replace(os.sep, "/")
            if rel not in written and rel != MARKER:
                os.unlink(os.path.join(dirpath, name))


@dataclass
class _Job:
    """What every run-page worker needs; module-global so forked workers inherit it instead of pickling it."""

    env: jinja2.Environment
    out: Path
    common: dict[str, Any]
    runs: list[tuple[RunRow, Workload]]
    cache: dict[str, Any] = field(default_factory=dict)  # the previous build's manifest, by run page


_JOB: _Job | None = None


def _write_if_changed(path: Path, text: str) -> None:
    """Leave an identical file alone: a rebuild then rewrites only the pages of new results (and on ext4
    rewriting an existing file in place forces its blocks out at close, which made rebuilds 5x slower)."""
    data = text.encode("utf-8")
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return
    except OSError:
        pass
    with open(path, "wb") as f:
        f.write(data)


def _copy_if_changed(src: Path, dst: Path) -> None:
    """Copy with its mtime; skip when the copy already has the same size and mtime (results are append-only)."""
    try:
        a, b = src.stat(), dst.stat()
        if a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns:
            return
    except OSError:
        pass
    shutil.copy2(src, dst)


def _render(job: _Job, rel: str, template: str, common: bool = True, **ctx: Any) -> str:
    extra = job.common if common else {}
    html = job.env.get_template(template).render(root="../" * rel.count("/"), page=rel, **extra, **ctx)
    _write_if_changed(job.out / rel, html)
    return rel


def _signature(rr: RunRow) -> list[Any]:
    """What a run page's bytes depend on besides the site code: its result file and the log beside it."""
    st = rr.path.stat()
    sig: list[Any] = [rr.rel, st.st_size, st.st_mtime_ns]
    if rr.result.mllog and _safe_log_name(rr.result.mllog):
        try:
            lst = (rr.path.parent / rr.result.mllog).stat()
            sig += [lst.st_size, lst.st_mtime_ns]
        except OSError:
            sig.append(None)
    return sig


def _render_runs(lo: int, hi: int) -> tuple[list[str], dict[str, Any]]:
    """Run pages lo..hi: (files written or kept, manifest entries). A page whose inputs and site code are
    unchanged since the last build (per the manifest) is kept as it is, unrendered."""
    job = _JOB
    assert job is not None
    written: list[str] = []
    manifest: dict[str, Any] = {}
    for rr, w in job.runs[lo:hi]:
        sig = _signature(rr)
        old = job.cache.get(rr.page)
        if old is not None and old["sig"] == sig and all((job.out / f).is_file() for f in old["files"]):
            written += old["files"]
            manifest[rr.page] = old
            continue
        _attach_mllog(rr, job.out)
        _copy_if_changed(rr.path, job.out / rr.json_copy)
        files = [rr.json_copy] + ([rr.mllog_copy] if rr.mllog_copy else [])
        r = rr.result
        names = eval_names(r)
        files.append(_render(job, rr.page, "run.html", common=False, rr=rr, r=r, w=w, charts=run_charts(r),
                             record=record_tables(r), config_rows=kv_rows(flatten(r.config).items(), mono=True),
                             precision=precision_of(r), eval_names=names, eval_rows=eval_rows(r, names)))
        written += files
        manifest[rr.page] = {"sig": sig, "files": files}
    return written, manifest


def code_version() -> str:
    """A hash of everything that shapes the pages: a changed template or module re-renders every page."""
    h = hashlib.sha1()
    for f in sorted([*SITE_DIR.glob("templates/*"), *SITE_DIR.glob("static/*"),
                     *Path(__file__).parent.glob("*.py"), Path(__file__).parents[1] / "results.py"]):
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _read_manifest(out: Path, version: str) -> dict[str, Any]:
    try:
        data = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("code") != version or not isinstance(data.get("runs"), dict):
        return {}
    return data["runs"]


def _jobs(requested: int | None, n_runs: int) -> int:
    if requested is not None:
        return max(1, requested)
    env = os.environ.get("TRAINBENCH_SITE_JOBS")
    if env and env.isdigit():
        return max(1, int(env))
    # forking pays off only for many pages, and only where fork exists (Linux); elsewhere one process
    if n_runs < 1000 or not hasattr(os, "fork") or sys.platform == "darwin":
        return 1
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def _run_pages(job: _Job, jobs: int) -> tuple[list[str], dict[str, Any]]:
    global _JOB
    _JOB = job
    try:
        n = len(job.runs)
        if jobs <= 1 or n < 2:
            gc.freeze()  # the loaded results live until the end: spare them the collector's repeated walks
            try:
                return _render_runs(0, n)
            finally:
                gc.unfreeze()
        import concurrent.futures
        import multiprocessing

        chunk = max(1, -(-n // (jobs * 4)))
        bounds = [(lo, min(lo + chunk, n)) for lo in range(0, n, chunk)]
        written: list[str] = []
        manifest: dict[str, Any] = {}
        # freeze the parent's heap out of the collector: otherwise each forked worker's gc walks (and so
        # copies, page by page) every Result the parent holds, which made 2 workers slower than 1
        gc.freeze()
        try:
            with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"),
                                                        initializer=gc.disable) as pool:
                for files, entries in pool.map(_render_runs, *zip(*bounds, strict=True)):
                    written += files
                    manifest.update(entries)
        finally:
            gc.unfreeze()
        return written, manifest
    finally:
        _JOB = None


def build_site(
    results: Path,
    out: Path,
    baselines: Path | None = None,
    compare: Sequence[Path] = (),
    strict: bool = False,
    jobs: int | None = None,
    studies: Sequence[Path] = (),
) -> BuildReport:
    """Render the whole site into `out`; return what was built and which input files were skipped.

    Files are rewritten in place and stale ones pruned afterwards (a fresh copy of 10,000 run pages costs
    seconds, deleting the old ones first as many again). `jobs` > 1 renders run pages in forked workers.
    """
    t0 = time.perf_counter()
    if not results.exists():
        raise SiteError(f"--results {results}: no such folder (run `trainbench run ...` first, or point at one)")
    for c in compare:
        if not c.is_file():
            raise SiteError(f"--compare {c}: no such file")
    for st in studies:
        if not (st.is_file() or (st / "study.json").is_file()):
            raise SiteError(f"--study {st}: no such file (give a study.json or the folder `trainbench study` wrote)")
    loaded = load_results(results, strict=strict)  # strict: ResultError naming the file propagates
    phases = {"load": time.perf_counter() - t0}
    base, base_errors = load_baselines(baselines)
    if strict and base_errors:
        raise SiteError(base_errors[0])
    root = results if results.is_dir() else results.parent
    rows = []
    for path, r in loaded.results:
        rel = path.relative_to(root).as_posix()
        rid = short_hash(rel, 16)
        rows.append(RunRow(path, rel, r, f"r/{rid}.html", f"r/{rid}.json"))
    workloads = build_workloads(rows)
    for w in workloads:
        w.baselines = [b for b in base if b.workload == w.name]
    views: list[CompareView] = [compare_view(p, i) for i, p in enumerate(compare)]
    study_views: list[StudyView] = [study_view(p, i) for i, p in enumerate(studies)]
    if strict and any(v.error for v in [*views, *study_views]):
        raise SiteError(next(v.error for v in [*views, *study_views] if v.error))

    _prepare_out(out)
    skipped = [_relative_error(e, root) for e in loaded.errors + base_errors]
    version = code_version()
    job = _Job(_env(), out, {"compares": views, "studies": study_views, "n_results": len(rows)}, [(rr, w) for w in workloads for rr in w.runs],
               _read_manifest(out, version))
    t1 = time.perf_counter()
    run_files, manifest = _run_pages(job, _jobs(jobs, len(rows)))
    phases["run_pages"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    written = set(run_files)
    domains: dict[str, list[Workload]] = {}
    for w in workloads:
        domains.setdefault(w.domain, []).append(w)
    latest = max((rr.result.started_at for rr in rows), default=None)
    for w in workloads:
        curve, n_curves = convergence_chart(w)
        written.add(_render(job, w.page, "workload.html", w=w, history=history_charts(w), convergence=curve,
                            n_curves=n_curves, max_curves=MAX_CURVES))
    for v in views:
        written.add(_render(job, v.page, "compare.html", view=v))
    for sv in study_views:
        written.add(_render(job, sv.page, "study_page.html", view=sv))
    for asset in sorted((SITE_DIR / "static").iterdir()):
        if asset.is_file():
            _copy_if_changed(asset, out / "static" / asset.name)
            written.add(f"static/{asset.name}")
    # the index last: a reader who sees the new index finds every page it links
    written.add(_render(job, "index.html", "index.html", domains=domains, skipped=skipped, latest=latest,
                        hardware=sorted({rr.result.hardware.slug for rr in rows}),
                        backends=sorted({rr.result.backend for rr in rows}), n_workloads=len(workloads)))
    # the marker doubles as the manifest that lets the next build keep unchanged run pages
    (out / MARKER).write_text(json.dumps({"built_by": "trainbench site build", "code": version,
                                          "runs": dict(sorted(manifest.items()))}) + "\n", encoding="utf-8")
    _prune(out, written)
    phases["other_pages"] = time.perf_counter() - t1
    index = out / "index.html"
    return BuildReport(out=out, index=index, results=len(rows), workloads=len(workloads),
                       pages=sum(1 for p in written if p.endswith(".html")), skipped=skipped,
                       seconds=time.perf_counter() - t0, index_bytes=index.stat().st_size,
                       phases_s={k: round(v, 3) for k, v in phases.items()})


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

"""Run pages, written incrementally: a page whose result, log and site code are unchanged since the last build
(the manifest in the output's marker file) is kept unrendered; many pages render in forked workers.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from suite.site.data import RunRow, Workload, flatten, precision_of
from suite.site.render import eval_names, eval_rows, kv_rows, record_tables, run_charts

SITE_DIR = Path(__file__).resolve().parents[2] / "site"
MARKER = ".trainbench-site"  # a folder holding this file is ours to replace; it doubles as the manifest


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
    copy_if_changed(src, out / rr.mllog_copy)


@dataclass
class Job:
    """What every run-page worker needs; module-global so forked workers inherit it instead of pickling it."""

    env: jinja2.Environment
    out: Path
    common: dict[str, Any]
    runs: list[tuple[RunRow, Workload]]
    cache: dict[str, Any] = field(default_factory=dict)  # the previous build's manifest, by run page


_JOB: Job | None = None


def write_if_changed(path: Path, text: str) -> None:
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


def copy_if_changed(src: Path, dst: Path) -> None:
    """Copy with its mtime; skip when the copy already has the same size and mtime (results are append-only)."""
    try:
        a, b = src.stat(), dst.stat()
        if a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns:
            return
    except OSError:
        pass
    shutil.copy2(src, dst)


def render_page(job: Job, rel: str, template: str, common: bool = True, **ctx: Any) -> str:
    extra = job.common if common else {}
    html = job.env.get_template(template).render(root="../" * rel.count("/"), page=rel, **extra, **ctx)
    write_if_changed(job.out / rel, html)
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
        copy_if_changed(rr.path, job.out / rr.json_copy)
        files = [rr.json_copy] + ([rr.mllog_copy] if rr.mllog_copy else [])
        r = rr.result
        names = eval_names(r)
        files.append(render_page(job, rr.page, "run.html", common=False, rr=rr, r=r, w=w, charts=run_charts(r),
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


def read_manifest(out: Path, version: str) -> dict[str, Any]:
    try:
        data = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("code") != version or not isinstance(data.get("runs"), dict):
        return {}
    return data["runs"]


def worker_count(requested: int | None, n_runs: int) -> int:
    if requested is not None:
        return max(1, requested)
    env = os.environ.get("TRAINBENCH_SITE_JOBS")
    if env and env.isdigit():
        return max(1, int(env))
    # forking pays off only for many pages, and only where fork exists (Linux); elsewhere one process
    if n_runs < 1000 or not hasattr(os, "fork") or sys.platform == "darwin":
        return 1
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def run_pages(job: Job, jobs: int) -> tuple[list[str], dict[str, Any]]:
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

"""The run page (r/<id>.html, with the result's JSON copy, its :::MLLOG log and a diffusion run's sample grid beside
it), written incrementally: a page whose result, log and site code are unchanged since the last build (the manifest
in the output's marker file) is kept unrendered, and its Result is never read; many pages render in forked workers.
Its template is run.html beside this file. Not a `render(job, site)` page: build.py calls `run_pages` first, because
the month entries of the manifest are made from what it returns.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from suite.results import tree as results_tree
from suite.results.record import Result
from suite.site.cells import flatten
from suite.site.data import RunRow, Workload
from suite.site.goodput_bar import goodput_bar
from suite.site.job import Job, copy_if_changed, render_page, write_if_changed
from suite.site.render import eval_names, eval_rows, eval_shown, kv_rows, record_tables, run_charts


def _safe_log_name(name: str) -> bool:
    return bool(name) and name == Path(name).name and name not in (".", "..") and "\\" not in name \
        and not name.startswith(".") and "\x00" not in name


def _log_name(rr: RunRow) -> str | None:
    """The MLLOG file name a result names, when it is a plain file name (else a note on the run, and None)."""
    name = rr.mllog
    if name and not _safe_log_name(name):
        rr.mllog_note = "the log name in this result is not a plain file name; not linked"
        return None
    return name or None


def _attach_mllog(rr: RunRow, out: Path, file_mode: int) -> None:
    """Copy the :::MLLOG file a result names, only when it is a plain file right beside the result."""
    if (name := _log_name(rr)) is None:
        return
    src = rr.path.parent / name
    if not results_tree.regular_inside(rr.path.parent, name):  # a symlink (to /proc/self/environ...) is not a log
        rr.mllog_note = ("the MLPerf log this result names is not beside it" if not os.path.lexists(src) else
                         "the MLPerf log this result names is a symlink or not a plain file; not published")
        return
    rr.mllog_copy = rr.page.removesuffix(".html") + ".mllog.txt"
    copy_if_changed(src, out / rr.mllog_copy, file_mode=file_mode)


# tasks whose workload writes a `.samples.png` beside its result (tests/site/test_site_samples.py keeps this the
# registry's: every task class with `side_files`); another run's stray PNG is never attached to its page
GRID_TASKS = frozenset({"diffusion"})
MAX_GRID_BYTES = 16 << 20
MAX_GRID_SIDE = 8192
MAX_GRID_PIXELS = 16 << 20  # a grid of 64 x 64 samples at 64 x 64 px; a decompression bomb is far beyond


def grid_problem(path: Path) -> str | None:
    """Why a sample grid may not be published (not a PNG, too many bytes, too many pixels), from its header alone
    (the 8-byte signature and the IHDR chunk: width and height); None when it may."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(24)
    except OSError as e:
        return f"unreadable ({e.strerror})"
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return "not a PNG"
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if size > MAX_GRID_BYTES:
        return f"{size} bytes (at most {MAX_GRID_BYTES})"
    if not (0 < width <= MAX_GRID_SIDE and 0 < height <= MAX_GRID_SIDE) or width * height > MAX_GRID_PIXELS:
        return f"{width} x {height} pixels (at most {MAX_GRID_SIDE} a side, {MAX_GRID_PIXELS} in all)"
    return None


def _attach_samples(rr: RunRow, result: Result, out: Path, file_mode: int) -> None:
    """Copy the sample grid a diffusion run wrote beside its result (`<stem>.samples.png`): a plain file only, of a
    run whose task makes grids, whose PNG header says a sane size (issue 50 item 13)."""
    spec = result.config.get("spec") if isinstance(result.config, dict) else None
    if not isinstance(spec, dict) or spec.get("task") not in GRID_TASKS:
        return
    name = Path(rr.rel).with_suffix(".samples.png").name
    if results_tree.regular_inside(rr.path.parent, name):
        why = grid_problem(rr.path.parent / name)
        if why is not None:
            print(f"site: {rr.path.parent / name} not published: {why}", file=sys.stderr)
            return
        rr.samples_copy = rr.page.removesuffix(".html") + ".samples.png"
        copy_if_changed(rr.path.parent / name, out / rr.samples_copy, file_mode=file_mode)


CHUNK = 500  # run pages whose Results are fetched at once
CHUNKS_PER_READER = 20  # the reader (and its shared lock on the index) is reopened every 10,000 pages

_JOB: Job | None = None


def _attach_archived(rr: RunRow, job: Job) -> None:
    """The JSON copy and MLLOG log of a run kept in a monthly archive (suite.results.index.archive), from the archive."""
    from suite.results.index import archive

    write_if_changed(job.out / rr.json_copy, archive.read_bytes(job.root, rr.source, rr.rel))
    if (name := _log_name(rr)) is None:
        return
    log = Path(rr.rel).parent.joinpath(name).as_posix()
    if not archive.has_member(job.root, rr.source, log):
        rr.mllog_note = "the MLPerf log this result names is not beside it"
        return
    rr.mllog_copy = rr.page.removesuffix(".html") + ".mllog.txt"
    write_if_changed(job.out / rr.mllog_copy, archive.read_bytes(job.root, rr.source, log))


def plan_runs(job: Job) -> tuple[list[int], dict[str, Any]]:
    """Which run pages to render (indices into job.runs); the manifest entries of the others, kept as they are
    because their result, their log and the site code are unchanged since the last build (a page deleted by
    hand is not noticed: like a page edited by hand, it is rendered again when its inputs or the code change)."""
    todo: list[int] = []
    manifest: dict[str, Any] = {}
    cache, arrived = job.cache, job.arrived
    for i, (rr, _) in enumerate(job.runs):
        old = cache.get(rr.page)
        if isinstance(old, dict) and old.get("sig") == rr.sig and isinstance(old.get("files"), list) \
                and rr.page not in arrived:
            manifest[rr.page] = old
        else:
            todo.append(i)
    return todo, manifest


def _render_runs(todo: list[int]) -> tuple[list[str], dict[str, Any]]:
    """Render the run pages `todo` (indices into the job's runs): (files written, manifest entries)."""
    job = _JOB
    assert job is not None and job.fetch is not None
    written: list[str] = []
    manifest: dict[str, Any] = {}
    for lo in range(0, len(todo), CHUNK * CHUNKS_PER_READER):
        with job.fetch() as fetch:
            for at in range(lo, min(len(todo), lo + CHUNK * CHUNKS_PER_READER), CHUNK):
                files, entries = _render_chunk(job, fetch, [job.runs[i] for i in todo[at:at + CHUNK]])
                written += files
                manifest.update(entries)
    return written, manifest


def _render_chunk(job: Job, fetch: Callable[[list[RunRow]], dict[str, Result]], part: list[tuple[RunRow, Workload]]
                  ) -> tuple[list[str], dict[str, Any]]:
    """Render one chunk of run pages, their Results read at once: (files written, manifest entries)."""
    written: list[str] = []
    manifest: dict[str, Any] = {}
    results = fetch([rr for rr, _ in part])
    file_mode = 0o666 & ~results_tree.umask()  # read once a chunk (20 us from /proc)
    for rr, w in part:
        r = results[rr.rel]
        if not rr.source:
            _attach_mllog(rr, job.out, file_mode)
            _attach_samples(rr, r, job.out, file_mode)
            if results_tree.regular_inside(job.root, rr.rel):
                copy_if_changed(rr.path, job.out / rr.json_copy, link=True, file_mode=file_mode)
            else:  # swapped for a symlink since it was read: publish what was read and validated, never the target
                write_if_changed(job.out / rr.json_copy, r.model_dump_json(indent=1))
        else:
            _attach_archived(rr, job)
        files = [rr.json_copy] + ([rr.mllog_copy] if rr.mllog_copy else [])
        files += [rr.samples_copy] if rr.samples_copy else []
        entry: dict[str, Any] = {"sig": rr.sig, "files": files}
        if rr.mllog and not rr.source and rr.mllog_copy is None and _safe_log_name(rr.mllog):
            entry["wait"] = rr.mllog  # rendered without its log: rendered again when it appears
        names = eval_names(r)
        shown = eval_shown(r, names)  # a long run's table is down-sampled; its JSON copy keeps every point
        files.append(render_page(job, rr.page, "run.html", common=False, rr=rr, r=r, w=w, charts=run_charts(r),
                                 record=record_tables(r), config_rows=kv_rows(flatten(r.config).items(), mono=True),
                                 precision=rr.precision, eval_names=names, eval_rows=eval_rows(r, names, shown),
                                 eval_shown=len(shown), goodput_bar=goodput_bar(r.goodput)))
        written += files
        manifest[rr.page] = entry
    return written, manifest


def run_pages(job: Job, jobs: int) -> tuple[list[str], dict[str, Any], int]:
    """Every run page of job.runs: kept, or rendered (in `jobs` forked workers); (files rendered, manifest,
    pages rendered). A kept page's files are in its manifest entry."""
    global _JOB
    todo, manifest = plan_runs(job)
    todo.sort(key=lambda i: job.runs[i][0].rowid)  # the index's order: each chunk's Results from a few row groups
    written: list[str] = []
    _JOB = job
    try:
        n = len(todo)
        # everything the parent holds now (the rows, the manifest) lives until the end of the build: freeze it
        # out of the collector, else its walks cost more than the pages and, in forked workers, copied every
        # page of the parent's heap (2 workers were slower than 1). build_site unfreezes at its end.
        gc.freeze()
        if jobs <= 1 or n < 2 * CHUNK:
            files, entries = _render_runs(todo)
            manifest.update(entries)
            return written + files, manifest, n
        import concurrent.futures
        import multiprocessing

        step = max(CHUNK, -(-n // (jobs * 4)))
        parts = [todo[lo:lo + step] for lo in range(0, n, step)]
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"),
                                                    initializer=gc.disable) as pool:
            for files, entries in pool.map(_render_runs, parts):
                written += files
                manifest.update(entries)
        return written, manifest, n
    finally:
        _JOB = None

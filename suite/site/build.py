"""results/ (+ baselines/, + compare JSON) -> a static leaderboard site in site/_build: a pure function of its inputs.

The output is plain files with relative links (works from file:// and any static host), no CDN and no
server; the same inputs give byte-identical output. Every string from a result goes through jinja2
autoescape and is placed only in text or double-quoted attributes; every link is built here from hashes
and slugs, never taken from a result. Corrupt result files are named and skipped (or fail under strict).
"""

from __future__ import annotations

import functools
import http.server
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from suite.fingerprint import load_warning
from suite.results import load_results
from suite.site.data import RunRow, Workload, build_workloads, cell_text, load_baselines, short_hash
from suite.site.pages import (
    MARKER,
    SITE_DIR,
    Job,
    code_version,
    copy_if_changed,
    read_manifest,
    render_page,
    run_pages,
    worker_count,
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
from suite.site.reports import CompareView, StudyView, compare_view, study_view


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
    view_errors = [v.error for v in views if v.error] + [v.error for v in study_views if v.error]
    if strict and view_errors:
        raise SiteError(view_errors[0])

    _prepare_out(out)
    skipped = [_relative_error(e, root) for e in loaded.errors + base_errors]
    version = code_version()
    job = Job(_env(), out, {"compares": views, "studies": study_views, "n_results": len(rows)}, [(rr, w) for w in workloads for rr in w.runs],
               read_manifest(out, version))
    t1 = time.perf_counter()
    run_files, manifest = run_pages(job, worker_count(jobs, len(rows)))
    phases["run_pages"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    written = set(run_files)
    domains: dict[str, list[Workload]] = {}
    for w in workloads:
        domains.setdefault(w.domain, []).append(w)
    latest = max((rr.result.started_at for rr in rows), default=None)
    for w in workloads:
        curve, n_curves = convergence_chart(w)
        written.add(render_page(job, w.page, "workload.html", w=w, history=history_charts(w), convergence=curve,
                            n_curves=n_curves, max_curves=MAX_CURVES))
    for v in views:
        written.add(render_page(job, v.page, "compare.html", view=v))
    for sv in study_views:
        written.add(render_page(job, sv.page, "study_page.html", view=sv))
    for asset in sorted((SITE_DIR / "static").iterdir()):
        if asset.is_file():
            copy_if_changed(asset, out / "static" / asset.name)
            written.add(f"static/{asset.name}")
    # the index last: a reader who sees the new index finds every page it links
    written.add(render_page(job, "index.html", "index.html", domains=domains, skipped=skipped, latest=latest,
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

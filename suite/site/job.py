"""What every page renders through: the build's `Job` (the jinja environment, the output folder, what each page
shares), `render_page`, the write- and copy-if-changed that keep an unchanged file untouched, the `Site` a page over
the whole results reads, and the code version that re-renders every page when any page's code or template changes.

The environment loads templates from the package (suite/site/templates/ for the shared base and macros, each page's
own folder for its templates: suite.site.pages), so an installed wheel renders the site as a checkout does.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import stat
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2

from suite.results import tree as results_tree
from suite.results.conditions import load_warning
from suite.results.record import Result
from suite.site import output, pages
from suite.site.cells import cell_text
from suite.site.data import RunRow, Workload
from suite.site.output import SiteError
from suite.site.render import fmt_date, fmt_num, fmt_pct, fmt_s, sort_value

PACKAGE_DIR = Path(__file__).resolve().parent  # suite/site: templates/ (shared), static/ (copied), pages/ (one each)
STATIC_DIR = PACKAGE_DIR / "static"

# a context (one connection to the index) giving: run rows -> their full Results by rel (for their pages)
ResultReader = Callable[[], AbstractContextManager[Callable[[list[RunRow]], dict[str, Result]]]]


def environment() -> jinja2.Environment:
    """The one jinja environment of a build: the shared templates and every registered page's, autoescaped."""
    loader = jinja2.ChoiceLoader([jinja2.PackageLoader("suite.site", "templates"), *pages.template_loaders()])
    try:
        loader.get_source(jinja2.Environment(), "base.html")
    except (jinja2.TemplateNotFound, ValueError) as e:
        raise SiteError(f"{PACKAGE_DIR / 'templates'}: site templates are missing (is this a full checkout or a "
                        f"complete installation of the package?): {e}") from None
    env = jinja2.Environment(
        loader=loader,
        autoescape=True,  # every template, whatever its name: results are untrusted text
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,  # one build, templates do not change: skip a stat per page
    )
    env.globals["inf"] = math.inf
    env.globals["load_warning"] = load_warning  # a run whose host was loaded says so on its page
    env.globals["nav_pages"] = pages.nav()  # (title, href) of each page that puts itself in the top bar
    env.filters.update(s=fmt_s, pct=fmt_pct, num=fmt_num, date=fmt_date, sortv=sort_value, text=cell_text,
                       clip=clip_text)
    return env


MAX_PAGE_TEXT = 20_000  # characters of one long text (an error, a traceback) shown on a page


def clip_text(text: str, limit: int = MAX_PAGE_TEXT) -> str:
    """Head and tail of a long text: a 48 MB error string once made a 120 MB run page. The result file
    (linked from the page) keeps the whole text."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return (f"{text[:half]}\n\n… {len(text) - 2 * half:,} characters left out here; the whole text is in the "
            f"result file …\n\n{text[-half:]}")


@dataclass
class Site:
    """What a page over the whole results reads (suite.site.pages: every page with a `render(job, site)`): the
    workloads with their leaderboards, by domain, the compare reports and studies given to the build, the input
    files skipped, and the counts the index shows."""

    workloads: list[Workload]
    domains: dict[str, list[Workload]]
    compares: list[Any]  # suite.site.pages.compare.CompareView (the page owns its type; job.py imports no page)
    studies: list[Any]  # suite.site.pages.study.StudyView
    skipped: list[str]
    n_results: int
    hardware: list[str]
    backends: list[str]
    latest: datetime | None
    rounds: list[str]


@dataclass
class Job:
    """What every run-page worker needs; module-global so forked workers inherit it instead of pickling it."""

    env: jinja2.Environment
    out: Path
    common: dict[str, Any]
    runs: list[tuple[RunRow, Workload]]
    cache: dict[str, Any] = field(default_factory=dict)  # the previous build's manifest, by run page
    arrived: set[str] = field(default_factory=set)  # run pages rendered without their log, which is now there
    root: Path = Path()  # the results folder
    fetch: ResultReader | None = None  # only the pages that are rendered read their Result



def write_if_changed(path: Path, text: str | bytes) -> None:
    """Leave an identical file alone: a rebuild then rewrites only the pages of new results (and on ext4
    rewriting an existing file in place forces its blocks out at close, which made rebuilds 5x slower)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return
    except OSError:
        pass
    output.before_write(path)  # the build's transaction keeps the old file (or notes the new one)
    path.unlink(missing_ok=True)  # a hard link into the previous site (see site/output.py): never write through it
    with open(path, "wb") as f:
        f.write(data)


def copy_if_changed(src: Path, dst: Path, link: bool = False, file_mode: int | None = None) -> None:
    """Copy with its mtime; skip when the copy already has the same size, mtime and mode (results are append-only).
    The copy gets the mode every file of the site gets (`file_mode`: 0666 less the umask, as open() makes it),
    never the source's: a result kept private in results/ is not published private, nor a private one public by
    a link. `link`: a hard link instead where the source already has that mode, the filesystem allows it (and
    TRAINBENCH_SITE_LINK is not 0): no data written, one directory entry. Safe because nothing of the site writes
    through a file of its folder (every writer here unlinks first, the transaction moves files); a tool that
    edits the site's JSON in place would edit the result itself, which is why it can be turned off."""
    wanted = (0o666 & ~results_tree.umask()) if file_mode is None else file_mode
    a = src.stat()
    try:
        b = dst.stat()
        if a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns and stat.S_IMODE(b.st_mode) == wanted:
            return
    except OSError:
        pass
    output.before_write(dst)
    dst.unlink(missing_ok=True)  # the transaction's backup is a hard link to it: never write through it
    if link and stat.S_IMODE(a.st_mode) == wanted \
            and os.environ.get("TRAINBENCH_SITE_LINK", "1") not in ("0", "off", "false", "no"):
        try:
            os.link(src, dst)
            return
        except OSError:  # another filesystem, or not allowed (protected hard links): a copy
            pass
    shutil.copyfile(src, dst)  # created as open() creates it: the site's mode, not the source's (copy2 copied it)
    os.utime(dst, ns=(a.st_atime_ns, a.st_mtime_ns))


def render_page(job: Job, rel: str, template: str, common: bool = True, **ctx: Any) -> str:
    extra = job.common if common else {}
    html = job.env.get_template(template).render(root="../" * rel.count("/"), page=rel, **extra, **ctx)
    write_if_changed(job.out / rel, html)
    return rel


def signature(rr: RunRow, size: int, mtime_ns: int) -> list[Any]:
    """What a run page's bytes depend on besides the site code and its log: its result file (size and mtime, as
    the index recorded them; for an archived run the archive's, which is rewritten only to add members). The log
    a result names is checked when its page is rendered; a page rendered while its log was missing waits for it
    (the unit's `waiting` list in the manifest) and is rendered again when it appears."""
    return [rr.rel, rr.source, size, mtime_ns]


def code_version() -> str:
    """A hash of everything that shapes the pages: a changed template, asset or module of the site (its pages
    included) re-renders every page."""
    h = hashlib.sha1()
    for f in sorted(f for f in PACKAGE_DIR.rglob("*") if f.suffix in (".py", ".html", ".css", ".js", ".svg")):
        if f.is_file() and "__pycache__" not in f.parts:
            h.update(f.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def read_manifest_all(out: Path, version: str, data: object = ...) -> dict[str, Any]:
    """The last build's manifest ("units": workload -> month -> its entry (suite/site/months.py); "pages": workload
    and month page -> its input digest; "cp": workload page -> the change-point tests its history charts made),
    or nothing when it was built by other site code (`data`: output.read_marker's, else read)."""
    if data is ...:
        data = output.read_marker(out)
    if not isinstance(data, dict) or data.get("code") != version or not isinstance(data.get("units"), dict):
        return {}
    return {k: data[k] if isinstance(data.get(k), dict) else {} for k in ("units", "pages", "cp")}


def worker_count(requested: int | None, n_runs: int) -> int:
    if requested is not None:
        return max(1, requested)
    env = os.environ.get("TRAINBENCH_SITE_JOBS")
    if env and env.isdigit():
        return max(1, int(env))
    # forking pays off only for many pages, and only where fork exists (Linux); elsewhere one process
    if n_runs < 1000 or not hasattr(os, "fork") or sys.platform == "darwin":
        return 1
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)



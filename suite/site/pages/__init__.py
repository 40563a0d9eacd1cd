"""The site's pages, one folder each: a page's Python (what it reads, how it renders) and its jinja templates live in
suite/site/pages/<page>/, and PAGES below lists the folders. Adding a page is a new folder plus one line here.

A folder whose module has `render(job, site) -> list[str]` is a page over the whole results: the build calls it with
the `suite.site.job.Site` (workloads, leaderboards, compare reports, studies, counts) after the run, month and workload
pages, in the order listed, and it returns the files it wrote. A module may also set `NAV = (title, href)` to put a
link to itself in every page's top bar. The run and workload pages are the incremental core: the build calls them by
name, because the manifest (suite/site/months.py) is made from what they return. Templates are loaded from the
package (jinja2.PackageLoader), so a wheel finds them as a checkout does; names are unique across folders.
"""

from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType

import jinja2

PAGES: tuple[str, ...] = (
    "run",  # r/<id>.html: one run, every field of its Result
    "workload",  # w/<workload>.html and its month pages w/<workload>-<YYYY-MM>.html
    "compare",  # compare/<n>-<name>.html: a `trainbench compare --json-out` report given with --compare
    "study",  # study/<n>-<name>.html: a `trainbench study` report given with --study
    "hardware",  # hardware.html: every machine seen in the results and where it stands on each leaderboard
    "index",  # index.html, the leaderboards: last, so a reader who sees the new index finds every page it links
)


@cache
def modules() -> tuple[ModuleType, ...]:
    return tuple(importlib.import_module(f"{__name__}.{name}") for name in PAGES)


def template_loaders() -> list[jinja2.BaseLoader]:
    """One loader per page folder (its *.html), in PAGES order."""
    return [jinja2.PackageLoader(m.__name__, ".") for m in modules()]


def whole_site_pages() -> list[ModuleType]:
    """The pages rendered from the whole `Site`, in PAGES order (index last)."""
    return [m for m in modules() if callable(getattr(m, "render", None))]


def nav() -> tuple[tuple[str, str], ...]:
    """(title, href from the site root) of each page that links itself from the top bar."""
    return tuple(m.NAV for m in modules() if getattr(m, "NAV", None))

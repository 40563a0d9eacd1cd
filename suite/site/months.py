"""The site's months: each (workload, month) is a unit with a checksum of its result files, and the manifest keeps,
per unit, its run pages, its submissions' history points and the logs its run pages still wait for. A build
reads the rows of a month only when its checksum changed or one of its pages must be rendered, so a month that
is as the last build left it costs one row of the checksum query, not one per run.

The checksum is computed in SQL by the index (suite.results.index.site_overview) and here, the same way, by the file walk
(`walk_catalog`): both roads then plan and render the same pages, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.results.tree import regular_inside
from suite.site.data import (
    RunRow,
    Submission,
    SubSummary,
    Unit,
    Workload,
    month_page,
    submissions,
    workload_page,
)
from suite.site.job import write_if_changed

UNIT_SEP = "\x1f"  # between the fields of a member, in the checksum


def checksum(members: Iterable[tuple[int, str, str, int, int]]) -> str:
    """The unit's members (role, path, archive, size, mtime): role 0 is a run started in the month, role 1 a seed
    of one of the month's submissions started in an earlier month. "count.lo.hi": the sums of the two 64-bit
    halves of each member's md5 (order-free, as the index computes it in SQL with md5_number_lower/upper:
    suite/results/index/__init__.py, `_UNITS`)."""
    n = lo = hi = 0
    for role, rel, source, size, mtime in members:
        d = hashlib.md5(UNIT_SEP.join((str(role), rel, source, str(size), str(mtime))).encode("utf-8", "surrogatepass")
                        ).digest()
        n += 1
        lo += int.from_bytes(d[8:], "little")
        hi += int.from_bytes(d[:8], "little")
    return f"{n}.{lo}.{hi}"


def walk_catalog(rows: list[RunRow]) -> tuple[list[Unit], list[RunRow]]:
    """The units of every run and the featured runs (see `featured`), from every row (the file walk): what the
    index computes in SQL. Sets each row's sub_month."""
    sub_month: dict[tuple[str, ...], str] = {}
    sub_ts: dict[tuple[str, ...], float] = {}
    for rr in rows:
        k = rr.sub_key
        sub_month[k] = max(sub_month.get(k, ""), rr.month)
        ts = rr.started_at.timestamp()
        sub_ts[k] = max(sub_ts.get(k, ts), ts)
    members: dict[tuple[str, str], list[tuple[int, str, str, int, int]]] = defaultdict(list)
    n_runs: dict[tuple[str, str], int] = defaultdict(int)
    for rr in rows:
        rr.sub_month = sub_month[rr.sub_key]
        size, mtime = rr.sig[2], rr.sig[3]
        members[(rr.workload, rr.month)].append((0, rr.rel, rr.source, size, mtime))
        n_runs[(rr.workload, rr.month)] += 1
        if rr.sub_month != rr.month:
            members[(rr.workload, rr.sub_month)].append((1, rr.rel, rr.source, size, mtime))
    units = [Unit(w, m, checksum(ms), n_runs[(w, m)]) for (w, m), ms in sorted(members.items())]
    best_lb: dict[tuple[str, ...], float] = {}
    best_series: dict[tuple[str, ...], float] = {}
    for k, ts in sub_ts.items():
        lb, series = (*k[:5], k[6]), (k[0], *k[2:5], k[6])
        best_lb[lb] = max(best_lb.get(lb, ts), ts)
        best_series[series] = max(best_series.get(series, ts), ts)
    featured = [rr for rr in rows if sub_ts[rr.sub_key] in (best_lb[(*rr.sub_key[:5], rr.sub_key[6])],
                                                              best_series[(rr.workload, *rr.sub_key[2:5], rr.sub_key[6])])]
    return units, featured


def workloads_of(units: list[Unit], featured: list[RunRow], domains: dict[str, str]) -> list[Workload]:
    """Every workload with its months, its featured submissions (every seed of the newest submission of each
    leaderboard row and of each configuration: all a leaderboard and the convergence chart can show) and its
    newest run (the first result file among the newest starts, as a walk over every run finds it)."""
    by_name: dict[str, Workload] = {}
    for u in units:
        w = by_name.get(u.workload)
        if w is None:
            w = by_name[u.workload] = Workload(u.workload, domains[u.workload], workload_page(u.workload))
        w.units.append(u)
    rows: dict[str, list[RunRow]] = defaultdict(list)
    for rr in featured:
        rows[rr.workload].append(rr)
    for name, w in by_name.items():
        w.featured = submissions(rows[name])
        top = max(rr.started_at for rr in rows[name])
        w.latest = min((rr for rr in rows[name] if rr.started_at == top), key=lambda rr: rr.order)
    return sorted(by_name.values(), key=lambda w: (w.domain, w.name))


# ---- what the last build left, and what this one must do ------------------------------------------------


@dataclass
class UnitPlan:
    """One unit in this build: `fresh` when its checksum, and the logs its pages wait for, are as the last build
    recorded (its run pages and history points are then kept as they are); `rows` when its rows must be read
    (it changed, or a page that shows it is rendered)."""

    w: Workload
    unit: Unit
    old: list[Any] | None  # the last build's entry (unit_entry): [checksum, pages, waiting, history, file]
    fresh: bool
    page: str  # its month page, or the workload page for the newest month
    page_digest: str
    render: bool = False  # its month page is rendered (the newest month's: see Plan.workload_pages)
    rows: bool = False
    history: list[SubSummary] | None = None  # a fresh month's history points, when its workload page renders

    @property
    def key(self) -> tuple[str, str]:
        return (self.unit.workload, self.unit.month)


@dataclass
class Plan:
    units: list[UnitPlan] = field(default_factory=list)
    workload_pages: dict[str, str] = field(default_factory=dict)  # workload page -> its digest, for those rendered
    digests: dict[str, str] = field(default_factory=dict)  # every workload and month page -> its digest

    def needed(self) -> list[tuple[str, str]]:
        return [up.key for up in self.units if up.rows]


def digest(*parts: Any) -> str:
    return hashlib.sha1(json.dumps(parts, default=str).encode("utf-8", "surrogatepass")).hexdigest()


def log_beside(root: Path, rel: str, name: str) -> bool:
    """The check pages._attach_mllog makes: the named log is a regular file right beside the result, inside the
    results folder (suite.results.tree.regular_inside: never a symlink)."""
    return regular_inside(root, (Path(rel).parent / name).as_posix())


def valid(entry: Any) -> bool:
    return (isinstance(entry, list) and len(entry) == 5 and isinstance(entry[0], str) and isinstance(entry[1], int)
            and isinstance(entry[2], list) and isinstance(entry[3], str) and isinstance(entry[4], str)
            and entry[4].startswith(UNITS_DIR + "/") and ".." not in entry[4])


def plan(workloads: list[Workload], old_units: dict[str, Any], old_pages: dict[str, Any], common: str, root: Path,
         out: Path) -> Plan:
    """Which units are fresh, which pages are rendered, which units' rows are read."""
    p = Plan()

    def kept(page: str, d: str) -> bool:
        p.digests[page] = d
        return old_pages.get(page) == d and os.path.isfile(out / page)

    for w in workloads:
        olds = old_units.get(w.name)
        olds = olds if isinstance(olds, dict) else {}
        mine = []
        for u in w.units:
            old = olds.get(u.month)
            old = old if valid(old) else None
            fresh = old is not None and old[0] == u.checksum and not any(
                not (isinstance(x, list) and len(x) == 3 and all(isinstance(v, str) for v in x))
                or log_beside(root, x[1], x[2]) for x in old[2])
            newest = u.month == w.newest
            page = w.page if newest else month_page(w.name, u.month)
            up = UnitPlan(w, u, old, fresh, page, digest(common, w.name, w.domain, u.month, u.checksum))
            if not newest:
                up.render = not kept(page, up.page_digest)
            up.rows = up.render or not fresh
            mine.append(up)
        wd = digest(common, w.name, w.domain, [(b.path, repr(b.agg)) for b in w.baselines],
                    [(u.month, u.checksum, u.n_runs) for u in w.units], w.rcp.source if w.rcp else None)
        if not kept(w.page, wd):
            p.workload_pages[w.page] = wd
            mine[-1].rows = True  # the workload page lists the newest month
            for up in mine:  # its history charts show every month's submissions
                if up.fresh and up.old is not None:
                    try:
                        up.history = [SubSummary.of_json(v) for v in json.loads(up.old[3])]
                    except (ValueError, TypeError):  # a damaged entry: the month is made again from its rows
                        up.fresh, up.rows = False, True
        p.units += mine
    return p


def attach(p: Plan, rows: list[RunRow]) -> None:
    """Give each unit whose rows were read its submissions and runs (on its workload, by month)."""
    by_w: dict[str, list[RunRow]] = defaultdict(list)
    for rr in rows:
        by_w[rr.workload].append(rr)
    for up in p.units:
        if not up.rows:
            continue
        m, w = up.unit.month, up.w
        mine = by_w[w.name]
        w.month_runs[m] = sorted((rr for rr in mine if rr.month == m), key=lambda rr: (rr.started_at, rr.order))
        w.month_subs[m] = submissions([rr for rr in mine if rr.sub_month == m])


UNITS_DIR = ".trainbench-site.d"  # one file a month: its run pages' entries (signature, files, a log waited for)


def unit_file(unit: Unit) -> str:
    return f"{UNITS_DIR}/{hashlib.sha1(unit.workload.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}-{unit.month}.json"


def old_runs(out: Path, entry: list[Any] | None) -> dict[str, Any] | None:
    """The run pages' entries of a month as the last build wrote them (None when its file is missing or damaged)."""
    if entry is None:
        return None
    try:
        data = json.loads((out / entry[4]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    runs = data.get("runs") if isinstance(data, dict) else None
    return runs if isinstance(runs, dict) else None


def history(w: Workload, plans: list[UnitPlan]) -> list[SubSummary]:
    """Every submission's history point, by (timestamp, order): a fresh month's from the manifest, the others'
    from the submissions just made."""
    out: list[SubSummary] = []
    for up in plans:
        out += up.history if up.history is not None else [s.summary() for s in w.month_subs[up.unit.month]]
    out.sort(key=lambda s: (s.timestamp, s.order))
    return out


def unit_entry(out: Path, up: UnitPlan, runs: dict[str, Any], subs: list[Submission]) -> list[Any]:
    """Write the month's file (its run pages' entries) and return its manifest entry: [checksum, run pages, the
    (page, result, log) of each run page still waiting for its log, its submissions' history points (a JSON
    string: a later build that does not render the workload page copies it unparsed), the month's file]."""
    waiting = [[page, e["sig"][0], e["wait"]] for page, e in runs.items() if e.get("wait")]
    rel = unit_file(up.unit)
    write_if_changed(out / rel, json.dumps({"runs": runs}, separators=(",", ":")))
    subs_json = json.dumps([s.summary().to_json() for s in subs], separators=(",", ":"))
    return [up.unit.checksum, len(runs), waiting, subs_json, rel]


def files_of(runs: dict[str, Any] | None) -> list[str]:
    """The files of a month's run pages, from its entries."""
    try:
        return [f for e in (runs or {}).values() for f in e["files"]]
    except (TypeError, KeyError):
        return []

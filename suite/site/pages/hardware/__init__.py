"""The hardware page (hardware.html, template hardware.html beside this file): every machine (hardware slug) seen in
the results, its device, and where its newest submissions stand on each workload's leaderboard (rank, time to
target, seeds reached, MFU), with a link to the index filtered to it. Read from the leaderboards the build already
made (`Site.workloads`): no result is read again, and an incremental build renders it as cheaply as the index.
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.site.data import Submission, Workload
from suite.site.job import Job, Site, render_page

NAV = ("Hardware", "hardware.html")


@dataclass
class Standing:
    """One leaderboard row of a machine: its workload, the spec it ran (and whether that is the newest spec's
    board), its rank on that board and the board's length, and the submission."""

    w: Workload
    spec_hash: str
    newest_spec: bool
    rank: int
    of: int
    sub: Submission


def standings(site: Site) -> dict[str, list[Standing]]:
    """Every hardware slug seen in the results (ranked or not) -> its leaderboard rows, in the index's order. Published
    MLPerf reference rows are not machines of this site's runners and are left out (they still count in `of`)."""
    out: dict[str, list[Standing]] = {h: [] for h in site.hardware}
    for w in site.workloads:
        for i, (spec_hash, subs) in enumerate(w.leaderboards()):
            for rank, s in enumerate(subs, 1):
                if not s.reference:
                    out.setdefault(s.hardware, []).append(Standing(w, spec_hash, i == 0, rank, len(subs), s))
    return dict(sorted(out.items()))


def render(job: Job, site: Site) -> list[str]:
    return [render_page(job, "hardware.html", "hardware.html", machines=standings(site))]

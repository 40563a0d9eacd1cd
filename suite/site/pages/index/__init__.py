"""The index (index.html, template index.html beside this file): every workload's leaderboards by domain, with the
filters by hardware, round and backend, and the input files the build skipped. Listed last in PAGES: a reader who
sees the new index finds every page it links.
"""

from __future__ import annotations

from suite.site.job import Job, Site, render_page


def render(job: Job, site: Site) -> list[str]:
    return [render_page(job, "index.html", "index.html", domains=site.domains, skipped=site.skipped,
                        latest=site.latest, n_results=site.n_results, hardware=site.hardware, backends=site.backends,
                        n_workloads=len(site.workloads), rounds=site.rounds)]

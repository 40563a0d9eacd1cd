"""Index scale benchmark (issue 18): the results index, and the readers on it, at N results plus a night of 10,000.

Results are real Result objects from benchmarks/sim/results.py in benchmarks/site_scale.py's mix (20 workloads x 4
hardware x 3 backends, 5-seed submissions, one a day per combination, 8 evaluations per curve), one in ten with
a 100-point series (2 metrics) as a per-step throughput run writes. Files are written with
Result.model_dump_json(indent=1) at results.result_path, as write_result does, but without its fsync per file
(population only; nothing measured depends on it). Timed, each in this process, wall seconds:

  index_cold_s        index of N files from nothing
  index_noop_s        index again with nothing new (the scan every reader pays first)
  index_incr_s        index after one night of 10,000 new result files
  site_cold_s         site build from the index into an empty folder (N + 10,000 results)   [--site]
  site_noop_s         the same build again with nothing new                                 [--site]
  site_incr_s         the same build again after another 1,000 new results                  [--site]
  compare_s           the last night against the night before (records from the index + compare's verdicts)
  history_s           every series' olympic time to target per commit

    PYTHONPATH=$PWD python benchmarks/index_scale.py --results 10000 [--site] [--keep DIR]

Prints one JSON line. Peak memory is this process's maximum RSS after each step (rss_mb: it only grows, so
the step where it rises is the one that needed it) and the forked page renderers' largest. With --keep DIR,
the N results are written once (DIR/populated-N marks them) and reused by later runs: the night and the
extra results, the index and the site are removed again at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.sim

from benchmarks.sim.results import T0, site_result  # noqa: E402
from benchmarks.site_scale import BACKENDS, HARDWARE, SEEDS  # noqa: E402
from suite.compare import model as compare_model  # noqa: E402
from suite.results import index  # noqa: E402
from suite.results.index import store as index_store  # noqa: E402
from suite.results.record import result_path  # noqa: E402

NIGHT = 10_000
WORKLOADS = [f"{d}/bench_{i:02d}" for i, d in enumerate(("cv", "nlp", "gnn", "rl") * 5)]
COMBOS = [(w, h, b) for w in WORKLOADS for h in HARDWARE for b in BACKENDS]


def populate(root: Path, start: int, n: int, per_day: int) -> list[Path]:
    """Results start..start+n of the sequence: `per_day` results a day, each day's submissions on one commit."""
    written = []
    for i in range(start, start + n):
        day, k = divmod(i, per_day)
        ci, seed = divmod(k, SEEDS)
        w, h, b = COMBOS[ci % len(COMBOS)]
        base_tta = 5.0 + (ci % 17) * 3.0
        reached = (seed + day + ci) % 23 != 0
        r = site_result(
            w, h, b, seed=seed, evals=100 if i % 10 == 0 else 8,
            tta_s=base_tta * (1 - 0.0002 * day) * (1 + 0.02 * seed) if reached else None,
            status="reached" if reached else "budget",
            started_at=T0 + timedelta(days=day, minutes=seed + 5 * (ci // len(COMBOS))), sha=f"{day:040x}",
            run_id=f"{i:08x}",
        )
        path = result_path(root, r)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(r.model_dump_json(indent=1), encoding="utf-8")
        written.append(path)
    return written


CPU: dict[str, float] = {}  # step -> CPU seconds (this process's threads + finished children): load-independent


def _cpu_s() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _timed(fn, name: str = ""):  # noqa: ANN001, ANN202
    t, c = time.perf_counter(), _cpu_s()
    value = fn()
    wall = round(time.perf_counter() - t, 2)
    if name:
        CPU[name] = round(_cpu_s() - c, 2)
        # progress on stderr: a long run that is stopped still leaves its figures so far
        print(json.dumps({"step": name, "wall_s": wall, "cpu_s": CPU[name], "load": round(os.getloadavg()[0], 2),
                          "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}),
              file=sys.stderr, flush=True)
    return wall, value


def _compare_last_night(root: Path) -> dict[str, int]:
    from suite.compare import tta as cmp
    from suite.results.runfiles import Loaded, sides

    nights = index.nights(root)  # the one update (a scan: nothing new) every reader pays first
    cand, _ = index.records(root, "day = ?", [nights[-1]], refresh=False)
    base, _ = index.records(root, "day = ?", [nights[-2]], refresh=False)
    pairs = cmp.compare_sides(sides(Loaded(base, [], [], len(base))), sides(Loaded(cand, [], [], len(cand))),
                              compare_model.Settings())
    return {"baseline_runs": len(base), "candidate_runs": len(cand), "pairs": len(pairs)}


def _rss_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=int, default=10_000, help="results before the night of 10,000 new ones")
    ap.add_argument("--site", action="store_true", help="also time the site build (cold and incremental)")
    ap.add_argument("--keep", type=Path, help="keep (and reuse) the N results here instead of a temp folder")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="trainbench-index-scale-"))
    res, out = work / "results", work / "site"
    per_day = len(COMBOS) * SEEDS  # 1,200 a day: N = 250,000 is about seven months of nights
    figures: dict[str, object] = {"results": args.results, "cpus": len(os.sched_getaffinity(0))}
    rss: dict[str, int] = {}
    added: list[Path] = []
    marker = work / f"populated-{args.results}"
    try:
        if marker.exists():
            figures["populate_s"] = "reused"
        else:
            figures["populate_s"], _ = _timed(lambda: populate(res, 0, args.results, per_day))
            marker.write_text("", encoding="utf-8")
        shutil.rmtree(res / ".index", ignore_errors=True)
        figures["load_before"] = round(os.getloadavg()[0], 2)
        figures["index_cold_s"], rep = _timed(lambda: index_store.update(res), "index_cold")
        figures["index_cold_phases_s"] = rep.phases_s
        rss["index_cold"] = _rss_mb()
        figures["index_noop_s"], _ = _timed(lambda: index_store.update(res), "index_noop")
        added += populate(res, args.results, NIGHT, per_day)
        figures["index_incr_s"], rep = _timed(lambda: index_store.update(res), "index_incr")
        figures["index_incr_read"] = rep.read
        figures["index_incr_phases_s"] = rep.phases_s
        rss["index_incr"] = _rss_mb()
        figures["db_bytes"] = index_store.db_path(res).stat().st_size
        figures["result_bytes"] = sum(f.stat().st_size for f in res.rglob("*.json"))
        figures["compare_s"], figures["compare"] = _timed(lambda: _compare_last_night(res), "compare")
        rss["compare"] = _rss_mb()
        figures["history_s"], series = _timed(lambda: index.history(res), "history")
        figures["history_series"] = len(series)
        figures["history_points"] = sum(len(s.points) for s in series)
        rss["history"] = _rss_mb()
        if args.site:
            from suite.site.build import build_site

            shutil.rmtree(out, ignore_errors=True)
            figures["load_before_site"] = round(os.getloadavg()[0], 2)
            figures["site_cold_s"], rep = _timed(lambda: build_site(res, out), "site_cold")
            figures["site_cold_phases_s"] = rep.phases_s
            figures["index_html_bytes"] = rep.index_bytes
            figures["largest_workload_page_bytes"] = max(p.stat().st_size for p in (out / "w").glob("*.html"))
            rss["site_cold"] = _rss_mb()
            figures["site_noop_s"], rep = _timed(lambda: build_site(res, out), "site_noop")
            figures["site_noop_rendered"] = rep.rendered
            added += populate(res, args.results + NIGHT, 1_000, per_day)
            figures["site_incr_s"], rep = _timed(lambda: build_site(res, out), "site_incr")
            figures["site_incr_phases_s"] = rep.phases_s
            figures["site_incr_rendered"] = rep.rendered
            figures["site_pages"] = rep.pages
            rss["site_incr"] = _rss_mb()
        figures["rss_mb"] = rss
        figures["peak_rss_mb"] = _rss_mb()
        figures["peak_rss_children_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
        figures["load_after"] = round(os.getloadavg()[0], 2)
        figures["cpu_s"] = CPU
        print(json.dumps(figures))
        return 0
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
        else:  # back to the N results alone, for the next run
            for p in added:
                p.unlink(missing_ok=True)
            shutil.rmtree(res / ".index", ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())

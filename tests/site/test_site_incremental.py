"""The site built from the index renders only the pages whose inputs changed, reads a full Result only for the
run pages it renders, and writes the site folder as one transaction (a killed build is rolled back)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from support.site_factory import WL, write_hostile, write_standard

from benchmarks.sim.results import T0, site_result
from suite.results import index
from suite.results.record import write_result
from suite.site import data as site_data
from suite.site.build import MARKER, build_site
from suite.site.data import month_page, workload_page
from suite.site.months import UNITS_DIR
from suite.site.pages import workload as site_workloads

ROOT = Path(__file__).resolve().parents[2]
# the pages over the whole results rendered every build (a few pages, written only when their bytes change): index.html
# and hardware.html (suite/site/pages/: those with `render`; compare and study pages only where given)
EVERY_BUILD = 2


def _tree(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _stamps(out: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of every file but the manifest (the marker and its months' files): a file rewritten, even
    with the same bytes, gets a new one."""
    return {p.relative_to(out).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.rglob("*")
            if p.is_file() and p.name != MARKER and p.parent.name != UNITS_DIR}


def _runs_table(page: Path) -> str:
    """The runs table of a workload or month page (the leaderboard above it links seeds of any month)."""
    html = page.read_text(encoding="utf-8")
    return html[html.index('id="runs"'):]


def _fixture(res: Path) -> None:
    write_standard(res)
    write_hostile(res)
    write_result(res, site_result("rl/cartpole", "nvidia-a100-x8", "torch", seed=0, started_at=T0 + timedelta(days=3)))


def test_an_incremental_build_renders_only_what_changed_and_equals_a_fresh_walk(tmp_path, monkeypatch):
    res, out = tmp_path / "results", tmp_path / "site"
    _fixture(res)
    cold = build_site(res, out, use_index=True)
    assert cold.rendered == cold.pages  # a cold build renders every page
    fetched: list[str] = []
    real = index.results_of

    def counting(root, rels, *args, **kwargs):  # the only way a build reads a full Result from the index
        fetched.extend(rels)
        return real(root, rels, *args, **kwargs)

    monkeypatch.setattr(index, "results_of", counting)
    before = _stamps(out)
    noop = build_site(res, out, use_index=True)
    assert fetched == [] and noop.rendered == EVERY_BUILD  # only the whole-site pages render again; nothing is rewritten
    assert _stamps(out) == before

    # one new run of cv/digits_cnn in the same month: its run page, its workload page, the index and the hardware
    # page (h200's newest submission changed) are rendered, nothing else
    new = write_result(res, site_result(WL, "nvidia-h200-x8", "torch", seed=7, started_at=T0 + timedelta(days=12)))
    incr = build_site(res, out, use_index=True)
    assert fetched == [new.relative_to(res).as_posix()]
    assert incr.rendered == 2 + EVERY_BUILD and incr.results == cold.results + 1
    after = _stamps(out)
    changed = sorted(k for k in after if before.get(k) != after[k])
    new_page = next(k for k in changed if k.startswith("r/") and k.endswith(".html"))
    assert changed == sorted([new_page, new_page.replace(".html", ".json"), "index.html", "hardware.html", workload_page(WL)])
    assert before[workload_page("rl/cartpole")] == after[workload_page("rl/cartpole")]  # another workload: kept

    # a run in the next month: the workload page now lists December's runs, November's move to a page of
    # their own (rendered once), and the workload page links it
    fetched.clear()
    dec = write_result(res, site_result(WL, "nvidia-h200-x8", "torch", seed=8, started_at=T0 + timedelta(days=30)))
    incr = build_site(res, out, use_index=True)
    assert fetched == [dec.relative_to(res).as_posix()] and incr.rendered == 3 + EVERY_BUILD
    nov = month_page(WL, "2026-11")
    before, after = after, _stamps(out)
    changed = sorted(k for k in after if before.get(k) != after[k])
    dec_page = next(k for k in changed if k.startswith("r/") and k.endswith(".html"))
    assert changed == sorted([dec_page, dec_page.replace(".html", ".json"), "index.html", "hardware.html", workload_page(WL), nov])
    wl_html = (out / workload_page(WL)).read_text()
    wl_runs, nov_runs = (_runs_table(out / p) for p in (workload_page(WL), nov))
    assert f'href="../{nov}"' in wl_html and f'href="../{dec_page}"' in wl_runs
    assert f'href="../{new_page}"' in nov_runs and f'href="../{new_page}"' not in wl_runs  # each run listed once
    assert f'href="../{dec_page}"' not in nov_runs

    # another December run: November's page is kept as it was (same inode and mtime), not rendered
    fetched.clear()
    write_result(res, site_result(WL, "nvidia-h200-x8", "torch", seed=9, started_at=T0 + timedelta(days=31)))
    incr = build_site(res, out, use_index=True)
    assert len(fetched) == 1 and incr.rendered == 2 + EVERY_BUILD
    before, after = after, _stamps(out)
    assert before[nov] == after[nov] and before[workload_page("rl/cartpole")] == after[workload_page("rl/cartpole")]

    # a late run of November: its month page is rendered again (and the workload page: its history changed)
    fetched.clear()
    late = write_result(res, site_result(WL, "nvidia-a100-x8", "torch", seed=5, started_at=T0 + timedelta(days=13)))
    incr = build_site(res, out, use_index=True)
    assert fetched == [late.relative_to(res).as_posix()] and incr.rendered == 3 + EVERY_BUILD
    before, after = after, _stamps(out)
    changed = sorted(k for k in after if before.get(k) != after[k])
    late_page = next(k for k in changed if k.startswith("r/") and k.endswith(".html"))
    assert changed == sorted([late_page, late_page.replace(".html", ".json"), "index.html", "hardware.html", workload_page(WL), nov])  # a100 · torch's newest submission
    assert f'href="../{late_page}"' in _runs_table(out / nov)

    # byte for byte what a cold build by walking the files gives, manifest included
    build_site(res, tmp_path / "walked", use_index=False)
    assert _tree(out) == _tree(tmp_path / "walked")
    # and the walk's own incremental build agrees too
    write_result(res, site_result("rl/cartpole", "nvidia-a100-x8", "torch", seed=1, started_at=T0 + timedelta(days=4)))
    build_site(res, tmp_path / "walked", use_index=False)
    build_site(res, out, use_index=True)
    assert _tree(out) == _tree(tmp_path / "walked")


def test_a_removed_run_is_pruned_and_a_changed_workload_page_rolls_back_on_failure(tmp_path, monkeypatch):
    res, out = tmp_path / "results", tmp_path / "site"
    paths = write_standard(res)["runs"]
    build_site(res, out, use_index=True)
    before = _tree(out)
    paths[0].unlink()

    def boom(*a, **k):
        raise RuntimeError("injected failure after the run pages")

    monkeypatch.setattr(site_workloads, "history_charts", boom)
    with pytest.raises(RuntimeError, match="injected"):
        build_site(res, out, use_index=True)
    assert _tree(out) == before  # nothing pruned, nothing half-written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "site"]
    monkeypatch.undo()
    report = build_site(res, out, use_index=True)
    assert report.results == len(paths) - 1 + 3 + 3  # the three older runs and the second workload stay
    assert len(_tree(out)) < len(before)  # the removed run's page and copy are gone


KILLED_BUILD = """
import os, sys
from pathlib import Path
from suite.site.pages import workload as pages
from suite.site.build import build_site

real = pages.render_page
def slow(job, rel, *a, **k):
    out = real(job, rel, *a, **k)
    if rel.startswith("w/"):
        print("half", flush=True)
        os.kill(os.getpid(), 9)  # killed after some pages of this build were written in place
    return out
pages.render_page = slow  # the workload pages render after the run pages
build_site(Path(sys.argv[1]), Path(sys.argv[2]), use_index=True)
"""


def test_a_killed_build_is_rolled_back_by_the_next_one(tmp_path):
    res, out = tmp_path / "results", tmp_path / "site"
    write_standard(res)
    build_site(res, out, use_index=True)
    before = _tree(out)
    write_result(res, site_result(WL, "nvidia-h200-x8", "torch", seed=8, started_at=T0 + timedelta(days=31)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", KILLED_BUILD, str(res), str(out)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL and "half" in proc.stdout
    stale = [p for p in tmp_path.iterdir() if ".txn-" in p.name]
    assert len(stale) == 1 and _tree(out) != before  # the dead build left its new run page and a journal
    # the next build (a reader of the same folder would see the old index.html meanwhile) undoes it first
    from suite.site.output import _recover_stale

    _recover_stale(out.resolve())
    assert _tree(out) == before and not [p for p in tmp_path.iterdir() if ".txn-" in p.name]
    build_site(res, out, use_index=True)
    build_site(res, tmp_path / "walked", use_index=False)
    assert _tree(out) == _tree(tmp_path / "walked")


# ---- months as units: an unchanged month costs one row of the checksum query, not one per run -------------------


def _nights(res: Path, workload: str, nights: range, step_at: int = 6, hardware: str = "nvidia-h200-x8") -> None:
    """One 3-seed submission a night (a commit each), with a 30% step in time to target at `step_at` and ~1% noise."""
    for night in nights:
        tta = 10.0 * (1.3 if night >= step_at else 1.0) * (1 + 0.01 * ((night * 7919) % 13 - 6) / 6)
        for seed in range(3):
            write_result(res, site_result(workload, hardware, "torch", seed=seed, tta_s=tta * (1 + 0.01 * seed),
                                          started_at=T0 + timedelta(days=night, minutes=seed), sha=f"{night:040x}"))


def test_an_unchanged_month_is_one_row_and_a_changed_one_reads_only_its_own_rows(tmp_path, monkeypatch):
    from suite.site import months as site_months

    res, out = tmp_path / "results", tmp_path / "site"
    _nights(res, WL, range(0, 45))  # November and December 2026 (T0 is 1 November)
    _nights(res, "rl/cartpole", range(0, 3))
    build_site(res, out, use_index=True)
    asked: list[list[tuple[str, str]]] = []
    real_rows, real_old = index.site_unit_rows, site_months.old_runs
    opened: list[str] = []
    monkeypatch.setattr(index, "site_unit_rows", lambda root, cols, units: asked.append(list(units)) or
                        real_rows(root, cols, units))
    monkeypatch.setattr(site_months, "old_runs", lambda out_, entry: opened.append(entry and entry[4]) or
                        real_old(out_, entry))
    build_site(res, out, use_index=True)
    assert asked == [[]] and opened == []  # nothing new: no month's rows, no month's file
    # a night in December: only December's rows are read (the workload page shows its runs), and only its file
    write_result(res, site_result(WL, "nvidia-h200-x8", "torch", seed=0, started_at=T0 + timedelta(days=46)))
    rows: list[int] = []
    monkeypatch.setattr(index, "site_unit_rows", lambda root, cols, units: asked.append(list(units)) or
                        rows.append(len(found := real_rows(root, cols, units))) or found)
    asked.clear()
    build_site(res, out, use_index=True)
    dec = (WL, "2026-12")
    assert asked == [[dec]] and opened == [site_months.unit_file(site_months.Unit(WL, "2026-12", "", 0))]
    assert rows == [3 * (45 - 30) + 1]  # December's runs only: November's 90 are not read
    # the same site as a cold walk, manifest included
    build_site(res, tmp_path / "walked", use_index=False)
    assert _tree(out) == _tree(tmp_path / "walked")


def test_change_points_are_tested_again_only_for_the_segments_a_new_point_changed(tmp_path, monkeypatch):
    from suite.compare import history

    res, out = tmp_path / "results", tmp_path / "site"
    _nights(res, WL, range(0, 24))
    _nights(res, "rl/cartpole", range(0, 24), step_at=12)
    tested: list[int] = []
    real = history._test_segment
    monkeypatch.setattr(history, "_test_segment", lambda seg, *a: tested.append(len(seg)) or real(seg, *a))
    build_site(res, out, use_index=True)
    cold = len(tested)
    assert cold >= 4  # each series: the whole, and the side(s) of its step long enough to be tested
    html = (out / workload_page(WL)).read_text(encoding="utf-8")
    assert html.count('class="change-point"') == 1  # the 30% step at night 6
    tested.clear()
    build_site(res, out, use_index=True)
    assert tested == []  # nothing new: no workload page rendered, no segment tested
    # a new night of cv/digits_cnn: its series gains a point, so the segments that hold the last point are tested
    # again, the others (and the other workload's series) come from the cache
    _nights(res, WL, range(24, 25))
    build_site(res, out, use_index=True)
    assert 0 < len(tested) < cold and all(n >= 25 - 6 for n in tested)  # [0, 25) and [6, 25) only
    # the page rendered again with the same series (its digest forgotten): every test comes from the cache
    def forget(damage_cache: bool) -> None:
        marker = json.loads((out / MARKER).read_text(encoding="utf-8"))
        marker["pages"][workload_page(WL)] = "forgotten"
        for key in marker["cp"][workload_page(WL)] if damage_cache else ():
            marker["cp"][workload_page(WL)][key] = ["not", "a test"]  # not what change_points writes
        (out / MARKER).write_text(json.dumps(marker), encoding="utf-8")

    forget(damage_cache=False)
    tested.clear()
    assert build_site(res, out, use_index=True).rendered == 1 + EVERY_BUILD and tested == []
    # a damaged cache is computed again, and gives the same site
    forget(damage_cache=True)
    build_site(res, out, use_index=True)
    assert sorted(tested) == [19, 25]
    build_site(res, tmp_path / "walked", use_index=False)
    assert _tree(out) == _tree(tmp_path / "walked")


def test_a_damaged_month_entry_or_file_is_made_again_from_its_rows(tmp_path):
    res, out = tmp_path / "results", tmp_path / "site"
    _nights(res, WL, range(0, 40))
    build_site(res, out, use_index=True)
    marker = json.loads((out / MARKER).read_text(encoding="utf-8"))
    nov = marker["units"][WL]["2026-11"]
    nov[3] = "[[not json"  # the month's history points
    (out / MARKER).write_text(json.dumps(marker), encoding="utf-8")
    for f in (out / UNITS_DIR).glob("*-2026-11.json"):
        f.write_text("{damaged", encoding="utf-8")  # and its run pages' entries
    late = write_result(res, site_result(WL, "nvidia-a100-x8", "torch", seed=0, started_at=T0 + timedelta(days=5)))
    build_site(res, out, use_index=True)
    build_site(res, tmp_path / "walked", use_index=False)
    assert _tree(out) == _tree(tmp_path / "walked")
    late_page = f"r/{site_data.short_hash(late.relative_to(res).as_posix(), 16)}.html"
    assert f'href="../{late_page}"' in _runs_table(out / month_page(WL, "2026-11"))


def test_forked_renderers_build_the_same_site_as_one_process(tmp_path):
    """More than 2 x pages.CHUNK run pages to render: they render in forked workers, each reading its Results
    through its own connection to the index; the site is the one a single process and the file walk build."""
    from benchmarks.index_scale import COMBOS, SEEDS, populate

    res = tmp_path / "results"
    populate(res, 0, 1_100, len(COMBOS) * SEEDS)
    forked = build_site(res, tmp_path / "forked", use_index=True, jobs=2)
    assert forked.rendered > 1_100
    build_site(res, tmp_path / "single", use_index=True, jobs=1)
    build_site(res, tmp_path / "walked", use_index=False, jobs=2)
    assert _tree(tmp_path / "forked") == _tree(tmp_path / "single") == _tree(tmp_path / "walked")

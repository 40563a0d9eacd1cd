"""The site built from the index renders only the pages whose inputs changed, reads a full Result only for the
run pages it renders, and writes the site folder as one transaction (a killed build is rolled back)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from suite import index
from suite.results import write_result
from suite.site import workloads as site_workloads
from suite.site.build import MARKER, build_site
from suite.site.data import month_page, workload_page
from suite.site.units import UNITS_DIR
from tests.site_factory import T0, WL, make_result, write_hostile, write_standard

ROOT = Path(__file__).resolve().parents[1]


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
    write_result(res, make_result("rl/cartpole", "nvidia-a100-x8", "torch", seed=0, started_at=T0 + timedelta(days=3)))


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
    assert fetched == [] and noop.rendered == 1  # only index.html is rendered again; nothing is rewritten
    assert _stamps(out) == before

    # one new run of cv/digits_cnn in the same month: its run page, its workload page and the index are
    # rendered, nothing else
    new = write_result(res, make_result(WL, "nvidia-h200-x8", "torch", seed=7, started_at=T0 + timedelta(days=12)))
    incr = build_site(res, out, use_index=True)
    assert fetched == [new.relative_to(res).as_posix()]
    assert incr.rendered == 3 and incr.results == cold.results + 1
    after = _stamps(out)
    changed = sorted(k for k in after if before.get(k) != after[k])
    new_page = next(k for k in changed if k.startswith("r/") and k.endswith(".html"))
    assert changed == sorted([new_page, new_page.replace(".html", ".json"), "index.html", workload_page(WL)])
    assert before[workload_page("rl/cartpole")] == after[workload_page("rl/cartpole")]  # another workload: kept

    # a run in the next month: the workload page now lists December's runs, November's move to a page of
    # their own (rendered once), and the workload page links it
    fetched.clear()
    dec = write_result(res, make_result(WL, "nvidia-h200-x8", "torch", seed=8, started_at=T0 + timedelta(days=30)))
    incr = build_site(res, out, use_index=True)
    assert fetched == [dec.relative_to(res).as_posix()] and incr.rendered == 4
    nov = month_page(WL, "2026-11")
    before, after = after, _stamps(out)
    changed = sorted(k for k in after if before.get(k) != after[k])
    dec_page = next(k for k in changed if k.startswith("r/") and k.endswith(".html"))
    assert changed == sorted([dec_page, dec_page.replace(".html", ".json"), "index.html", workload_page(WL), nov])
    wl_html = (out / workload_page(WL)).read_text()
    wl_runs, nov_runs = (_runs_table(out / p) for p in (workload_page(WL), nov))
    assert f'href="../{nov}"' in wl_html and f'href="../{dec_page}"' in wl_runs
    assert f'href="../{new_page}"' in nov_runs and f'href="../{new_page}"' not in wl_runs  # each run listed once
    assert f'href="../{dec_page}"' not in nov_runs

    # another December run: November's page is kept as it was (same inode and mtime), not rendered
    fetched.clear()
    write_result(res, make_result(WL, "nvidia-h200-x8", "torch", seed=9, started_at=T0 + timedelta(days=31)))
    incr = build_site(res, out, use_index=True)
    assert len(fetched) == 1 and incr.rendered == 3
    before, after = after, _stamps(out)
    assert before[nov] == after[nov] and before[workload_page("rl/cartpole")] == after[workload_page("rl/cartpole")]

    # a late run of November: its month page is rendered again (and the workload page: its history changed)
    fetched.clear()
    late = write_result(res, make_result(WL, "nvidia-a100-x8", "torch", seed=5, started_at=T0 + timedelta(days=13)))
    incr = build_site(res, out, use_index=True)
    assert fetched == [late.relative_to(res).as_posix()] and incr.rendered == 4
    before, after = after, _stamps(out)
    changed = sorted(k for k in after if before.get(k) != after[k])
    late_page = next(k for k in changed if k.startswith("r/") and k.endswith(".html"))
    assert changed == sorted([late_page, late_page.replace(".html", ".json"), "index.html", workload_page(WL), nov])
    assert f'href="../{late_page}"' in _runs_table(out / nov)

    # byte for byte what a cold build by walking the files gives, manifest included
    build_site(res, tmp_path / "walked", use_index=False)
    assert _tree(out) == _tree(tmp_path / "walked")
    # and the walk's own incremental build agrees too
    write_result(res, make_result("rl/cartpole", "nvidia-a100-x8", "torch", seed=1, started_at=T0 + timedelta(days=4)))
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
from suite.site import pages
from suite.site.build import build_site

real = pages.render_page
def slow(job, rel, *a, **k):
    out = real(job, rel, *a, **k)
    if rel.startswith("w/"):
        print("half", flush=True)
        os.kill(os.getpid(), 9)  # killed after some pages of this build were written in place
    return out
pages.render_page = slow
import suite.site.build as b
b.render_page = slow
build_site(Path(sys.argv[1]), Path(sys.argv[2]), use_index=True)
"""


def test_a_killed_build_is_rolled_back_by_the_next_one(tmp_path):
    res, out = tmp_path / "results", tmp_path / "site"
    write_standard(res)
    build_site(res, out, use_index=True)
    before = _tree(out)
    write_result(res, make_result(WL, "nvidia-h200-x8", "torch", seed=8, started_at=T0 + timedelta(days=31)))
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

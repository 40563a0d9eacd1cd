"""Issue 17, results and site: no build deletes or re-reads a user's results, every reader follows the same
folders and gives the same verdict, and what the site cannot render is refused, not crashed on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

import suite.site.pages.workload as site_workloads
from benchmarks.sim.results import site_result
from suite.results import baselines as bl
from suite.results import runfiles
from suite.results.record import ResultError, ResultWriteError, load_results, parse_result, write_result
from suite.site.build import SiteError, build_site

ROOT = Path(__file__).resolve().parents[2]
DEEP = "[" * 100_000 + "]" * 100_000


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}, cwd=ROOT)


def _write(root: Path, n: int = 2, **kw) -> list[Path]:
    return [write_result(root, site_result(seed=s, **kw)) for s in range(n)]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# ---- item 1: --out overlapping --results is refused; only files the site wrote are pruned -------------------


def test_out_equal_to_an_empty_results_folder_is_refused_then_results_survive(tmp_path):
    res = tmp_path / "R"
    res.mkdir()
    with pytest.raises(SiteError, match="apart from its inputs"):
        build_site(res, res)
    originals = _write(res)
    (originals[0].parent / "x.mllog.txt").write_text(":::MLLOG {}\n")
    with pytest.raises(SiteError, match="apart from its inputs"):
        build_site(res, res)
    assert all(p.is_file() for p in originals) and (originals[0].parent / "x.mllog.txt").is_file()


def test_out_reaching_results_through_a_symlink_or_holding_them_is_refused(tmp_path):
    res = tmp_path / "site" / "results"
    _write(res)
    (tmp_path / "link").symlink_to(res)
    for out in (tmp_path / "link", tmp_path / "site"):
        with pytest.raises(SiteError, match="apart from its inputs"):
            build_site(res, out)


def test_cli_refuses_overlap_with_exit_2(tmp_path):
    res = tmp_path / "R"
    _write(res, 1)
    p = _cli("site", "build", "--results", str(res), "--out", str(res), "--baselines", str(tmp_path / "none"))
    assert p.returncode == 2 and "apart from its inputs" in p.stderr and "Traceback" not in p.stderr


def test_a_file_the_site_did_not_write_is_never_pruned(tmp_path):
    res, out = tmp_path / "results", tmp_path / "out"
    paths = _write(res, 3)
    build_site(res, out)
    (out / "CNAME").write_text("bench.example\n")  # a user's own file beside the pages
    (out / "r" / "notes.txt").write_text("mine\n")
    pages_before = sorted((out / "r").glob("*.html"))
    paths[-1].unlink()
    report = build_site(res, out)
    assert (out / "CNAME").read_text() == "bench.example\n" and (out / "r" / "notes.txt").is_file()
    assert len(sorted((out / "r").glob("*.html"))) == len(pages_before) - 1 == report.results
    manifest = json.loads((out / ".trainbench-site").read_text())
    assert "CNAME" not in manifest["files"] and "index.html" in manifest["files"]


# ---- item 2: --out inside the results folder -------------------------------------------------------------


def test_out_inside_results_is_refused_so_runs_never_multiply(tmp_path):
    res = tmp_path / "res"
    _write(res)
    with pytest.raises(SiteError, match="is inside --results"):
        build_site(res, res / "site")
    assert not (res / "site").exists()
    assert len(load_results(res).results) == 2


# ---- item 5: one rule for symlinked folders, the writer's and every reader's (since issue 35 item 1: never ----
# followed out of the results folder; tests/results/test_hardening_tree.py has each reader)


def test_a_symlinked_results_folder_is_refused_by_the_writer_and_skipped_by_every_reader(tmp_path):
    res, elsewhere = tmp_path / "results", tmp_path / "bigdisk"
    elsewhere.mkdir()
    res.mkdir()
    (res / "nvidia-h200-x8").symlink_to(elsewhere, target_is_directory=True)
    (elsewhere / "loop").symlink_to(res, target_is_directory=True)  # a link loop must not hang or double count
    with pytest.raises(ResultWriteError, match="leads through a symlink out of the results folder"):
        _write(res, 1)  # written there, no reader would see it
    assert list(elsewhere.iterdir()) == [elsewhere / "loop"]
    (res / "nvidia-h200-x8").unlink()
    (tmp_path / "linked").symlink_to(res, target_is_directory=True)  # the whole folder linked: the tree given
    assert len(_write(tmp_path / "linked", 3)) == 3
    assert len(load_results(tmp_path / "linked").results) == 3
    loaded = bl.load_paths([tmp_path / "linked"])
    assert len(loaded.records) == 3 and loaded.errors == []
    assert build_site(tmp_path / "linked", tmp_path / "out").results == 3
    p = _cli("results", "validate", str(tmp_path / "linked"))
    assert p.returncode == 0 and "3 valid" in p.stdout + p.stderr


# ---- item 6: one verdict per file --------------------------------------------------------------------------


def test_a_nan_metric_reads_the_same_in_validate_compare_and_promote(tmp_path):
    res = tmp_path / "results"
    path = _write(res, 1)[0]
    data = json.loads(path.read_text())
    data["mfu"] = "NaN"  # how the writer itself encodes a NaN
    path.write_text(json.dumps(data))
    assert parse_result(path.read_text(), str(path)).mfu != parse_result(path.read_text(), str(path)).mfu
    rec = runfiles.read_file(path)
    assert isinstance(rec, runfiles.RunRecord) and rec.figures.mfu != rec.figures.mfu  # NaN, read, not skipped
    assert bl.load_paths([res]).errors == []


# ---- item 10: deep nesting is a named bad file everywhere -----------------------------------------------------


def test_deeply_nested_result_baseline_and_compare_files_are_named_not_crashed(tmp_path):
    res, base = tmp_path / "results", tmp_path / "baselines"
    _write(res, 2)
    deep = res / "deep.json"
    deep.write_text('{"schema_version": 1, "x": ' + DEEP + "}")
    with pytest.raises(ResultError, match="nested too deeply"):
        runfiles.read_file(deep)
    loaded = bl.load_paths([res])
    assert len(loaded.records) == 2 and any("nested too deeply" in e for e in loaded.errors)
    (base / "h" / "cv" / "x").mkdir(parents=True)
    (base / "h" / "cv" / "x" / "torch.json").write_text(DEEP)
    cmp_file = tmp_path / "compare.json"
    cmp_file.write_text(DEEP)
    report = build_site(res, tmp_path / "out", baselines=base, compare=[cmp_file])
    assert report.results == 2 and any("nested too deeply" in s for s in report.skipped)
    assert "nested too deeply" in next((tmp_path / "out" / "compare").glob("*.html")).read_text()


@pytest.mark.parametrize("cmd", [("compare", "-b", "{tmp}/base", "-c", "{res}"),
                                 ("compare", "--strict", "-b", "{tmp}/base", "-c", "{res}"),
                                 ("baseline", "promote", "{res}", "--to", "{tmp}/bl")])
def test_cli_on_a_deeply_nested_result_has_no_traceback(tmp_path, cmd):
    res = tmp_path / "results"
    _write(res, 3)
    _write(tmp_path / "base", 3)
    (res / "deep.json").write_text('{"schema_version": 1, "x": ' + DEEP + "}")
    p = _cli(*[c.format(res=res, tmp=tmp_path) for c in cmd])
    assert "Traceback" not in p.stderr and "RecursionError" not in p.stderr, p.stderr[-2000:]
    assert "nested too deeply" in p.stdout + p.stderr


# ---- item 11: what the site cannot render is refused; a failed build leaves the old site ---------------------


def test_a_year_1_start_is_invalid_for_validate_compare_and_site(tmp_path):
    res = tmp_path / "results"
    _write(res, 1)
    bad = write_result(res, site_result(seed=9, started_at=datetime(2026, 1, 1, tzinfo=UTC)))
    data = json.loads(bad.read_text())
    data["started_at"] = "0001-01-01T00:00:00Z"
    bad.write_text(json.dumps(data))
    with pytest.raises(ResultError, match="plausible run start"):
        parse_result(bad.read_text(), str(bad))
    with pytest.raises(ResultError, match="plausible run start"):
        runfiles.read_file(bad)
    report = build_site(res, tmp_path / "out")
    assert report.results == 1 and any("plausible run start" in s for s in report.skipped)
    alone = tmp_path / "alone"
    alone.mkdir()
    bad.rename(alone / bad.name)
    assert build_site(alone, tmp_path / "out2").results == 0  # was: ValueError: year 0 is out of range


def test_a_study_with_tau_max_1_is_named_on_its_page(tmp_path):
    res = tmp_path / "results"
    _write(res, 1)
    st = tmp_path / "study.json"
    st.write_text(json.dumps({"study": {"name": "s"}, "algorithms": ["a"], "tau_max": 1.0, "times_s": {"w": {"a": 1.0}},
                              "ratios": {"a": {"w": 1.0}}, "profiles": {"a": [[1.0, 1.0]]},
                              "scores": [{"algorithm": "a", "score": 1.0, "workloads_reached": 1, "workloads": 1}]}))
    build_site(res, tmp_path / "out", studies=[st])
    page = next((tmp_path / "out" / "study").glob("*.html")).read_text()
    assert "tau_max must be a finite number above 1" in page


def test_a_failed_build_leaves_the_previous_site_intact(tmp_path, monkeypatch):
    res, out = tmp_path / "results", tmp_path / "out"
    _write(res, 2)
    build_site(res, out)
    before = _files(out)
    _write(res, 1, sha="b" * 40)

    def boom(*a, **k):
        raise RuntimeError("injected failure half way through the build")

    monkeypatch.setattr(site_workloads, "convergence_chart", boom)  # after the run pages, before the index
    with pytest.raises(RuntimeError, match="injected"):
        build_site(res, out)
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "results"]  # no staging folder left behind

"""The results index (suite/results/index/): incremental, locked, rebuilt when damaged; archives; readers through it."""

from __future__ import annotations

import json
import multiprocessing
import os
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from support.site_factory import write_hostile, write_standard
from typer.testing import CliRunner

from benchmarks.sim.results import T0, site_result
from suite.cli import app
from suite.results import index
from suite.results.baselines import load_paths
from suite.results.index import pack as index_pack
from suite.results.index import store
from suite.results.index import store as index_store
from suite.results.record import load_results, write_result
from suite.site.build import MARKER, build_site
from suite.site.months import UNITS_DIR


def _tree(out: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.relative_to(out).as_posix() not in skip}


def _manifest(out: Path) -> tuple[str, ...]:
    return (MARKER, *(p.relative_to(out).as_posix() for p in (out / UNITS_DIR).glob("*")))


def _fixture(root: Path) -> None:
    write_standard(root)
    write_hostile(root)
    r = site_result("cv/digits_cnn", "nvidia-h200-x8", "torch", seed=9, started_at=T0 - timedelta(days=40),
                    mllog="run.mllog.txt")
    path = write_result(root, r)
    (path.parent / "run.mllog.txt").write_text(":::MLLOG {\"key\": \"run_start\"}\n", encoding="utf-8")
    (root / "bad").mkdir()
    (root / "bad" / "truncated.json").write_text('{"schema_version": 1, "run_id": "x', encoding="utf-8")
    newer = json.loads(path.read_text(encoding="utf-8"))
    newer["schema_version"] = 99
    (root / "bad" / "newer.json").write_text(json.dumps(newer), encoding="utf-8")


def test_site_from_index_is_byte_identical_to_walking_the_files(tmp_path):
    res = tmp_path / "results"
    _fixture(res)
    walked = build_site(res, tmp_path / "walked", use_index=False)
    indexed = build_site(res, tmp_path / "indexed", use_index=True)
    assert (res / ".index" / "results.duckdb").is_file()
    assert walked.results == indexed.results > 20 and walked.skipped == indexed.skipped and len(walked.skipped) == 2
    a, b = _tree(tmp_path / "walked"), _tree(tmp_path / "indexed")
    assert a.keys() == b.keys() and len(a) > 50
    assert [k for k in a if a[k] != b[k]] == []
    # and an incremental build through the index (a new result) equals a fresh walk of the same files
    write_result(res, site_result("nlp/char_gru", "nvidia-a100-x8", "torch", seed=0, started_at=T0 + timedelta(days=20)))
    build_site(res, tmp_path / "indexed", use_index=True)
    build_site(res, tmp_path / "walked2", use_index=False)
    assert _tree(tmp_path / "indexed") == _tree(tmp_path / "walked2")


def test_archive_round_trips_every_result_and_the_site_is_unchanged(tmp_path):
    res = tmp_path / "results"
    _fixture(res)
    before = load_results(res)
    originals = {p.relative_to(res).as_posix(): p.read_bytes() for p in res.rglob("*") if p.is_file()
                 and ".index" not in p.parts}
    build_site(res, tmp_path / "site_before", use_index=False)
    report = index_pack.pack(res, datetime(2027, 1, 1, tzinfo=UTC))
    assert report.results == len(before.results) and report.logs == 1
    assert sorted(report.left_loose) == ["bad/newer.json", "bad/truncated.json"]
    assert sorted(report.archives) == ["archive/2026-09.zip", "archive/2026-11.zip"]
    loose = sorted(p.relative_to(res).as_posix() for p in res.rglob("*.json") if ".index" not in p.parts)
    assert loose == ["bad/newer.json", "bad/truncated.json"]  # every good file moved, the bad ones stay to be fixed
    members: dict[str, bytes] = {}
    for arch in (res / "archive").glob("*.zip"):
        with zipfile.ZipFile(arch) as z:
            members.update({n: z.read(n) for n in z.namelist()})
    for rel, data in originals.items():  # nothing lost, byte for byte (results and the MLLOG log)
        assert members.get(rel, (res / rel).read_bytes() if (res / rel).exists() else None) == data, rel
    after = index.load(res)
    assert [(p, r) for p, r in after.results] == before.results  # every field, every run, same order
    assert after.errors == before.errors
    assert {e.source for e in after.entries} == {"archive/2026-09.zip", "archive/2026-11.zip"}
    build_site(res, tmp_path / "site_after", use_index=True)
    # every page and copy the same; the manifest (the marker and its months' files) names the archive
    assert _tree(tmp_path / "site_after", _manifest(tmp_path / "site_after")) == \
        _tree(tmp_path / "site_before", _manifest(tmp_path / "site_before"))
    # a second archive run into the same month keeps the old members
    write_result(res, site_result("rl/cartpole", "nvidia-h200-x8", "torch", seed=1, started_at=T0 + timedelta(days=2)))
    assert index_pack.pack(res, datetime(2027, 1, 1, tzinfo=UTC)).archives == {"archive/2026-11.zip": 1}
    assert len(index.load(res).entries) == len(before.results) + 1


def test_index_is_incremental_and_follows_changes(tmp_path):
    res = tmp_path / "results"
    write_standard(res)
    first = index_store.update(res)
    assert first.rebuilt == "new" and first.read == first.runs == 29
    assert index_store.update(res).read == 0
    for seed in range(3):
        write_result(res, site_result("rl/cartpole", "nvidia-h200-x8", "torch", seed=seed, started_at=T0))
    again = index_store.update(res)
    assert (again.read, again.runs, again.removed) == (3, 32, 0)
    victim = next(res.rglob("*.json"))
    victim.unlink()
    gone = index_store.update(res)
    assert (gone.read, gone.removed, gone.runs) == (0, 1, 31)
    # per-eval series: one row per metric per evaluation
    assert index.query(res, "SELECT count(*) FROM series")[0][0] == sum(
        len(p.metrics) for _, r in load_results(res).results for p in r.eval_curve)


def test_bad_files_are_reported_as_before_and_never_poison_the_index(tmp_path):
    res = tmp_path / "results"
    _fixture(res)
    walked = load_results(res)
    ix = index.load(res)
    assert ix.errors == walked.errors and len(ix.errors) == 2
    assert any("schema_version 99 is newer" in e for e in ix.errors)
    assert ix.results == walked.results
    with pytest.raises(ValueError) as walked_strict:
        load_results(res, strict=True)
    with pytest.raises(ValueError) as indexed_strict:
        index.load(res, strict=True)
    assert str(indexed_strict.value) == str(walked_strict.value) and "newer.json" in str(walked_strict.value)
    # the fixed file replaces its error with a run
    good = next(p for p in res.rglob("*.json") if "bad" not in p.parts and ".index" not in p.parts)
    (res / "bad" / "truncated.json").write_bytes(good.read_bytes())
    fixed = index.load(res)
    assert len(fixed.errors) == 1 and len(fixed.entries) == len(walked.results) + 1


@pytest.mark.parametrize("damage", ["garbage", "schema", "table"])
def test_a_damaged_or_older_index_is_rebuilt_from_the_files(tmp_path, damage):
    res = tmp_path / "results"
    write_standard(res)
    index_store.update(res)
    db = store.db_path(res)
    if damage == "garbage":
        db.write_bytes(b"this is not a duckdb file" * 100)
    else:
        con = duckdb.connect(str(db))
        con.execute("UPDATE meta SET value = '0.0'" if damage == "schema" else "DROP TABLE series")
        con.close()
    report = index_store.update(res)
    assert report.rebuilt and report.rebuilt != "new" and str(db) in report.rebuilt
    assert report.read == report.runs == 29
    assert len(index.load(res).entries) == 29


def _writer(res: str, n: int) -> None:
    for seed in range(n):
        write_result(Path(res), site_result("rl/cartpole", "cpu-amd-epyc-2c", "torch", seed=seed, evals=5,
                                            started_at=T0 + timedelta(minutes=seed)))
        if seed % 5 == 4:
            index_store.update(Path(res))


def _reader(res: str, rounds: int, q: multiprocessing.Queue) -> None:
    seen = []
    for _ in range(rounds):
        (runs, series, files), = index.query(Path(res), "SELECT (SELECT count(*) FROM runs), "
                                             "(SELECT count(*) FROM series), (SELECT count(*) FROM files)")
        seen.append((runs, series, files))
    q.put(seen)


def test_concurrent_writers_and_readers_never_see_half_an_update(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    index_store.update(res)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(res), 30)), ctx.Process(target=_writer, args=(str(res), 30)),
             ctx.Process(target=_reader, args=(str(res), 15, q)), ctx.Process(target=_reader, args=(str(res), 15, q))]
    for p in procs:
        p.start()
    observations = [q.get(timeout=300) for _ in range(2)]
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    for seen in observations:
        for runs, series, files in seen:
            assert series == runs * 5 * 2 and files == runs  # whole updates only: every run with all its points
    # the two writers wrote the same 30 runs' names at most once each per second; every file is indexed once
    assert index_store.update(res).runs == len(load_results(res).results) >= 30


def test_compare_records_through_the_index_match_the_file_reader(tmp_path):
    res = tmp_path / "results"
    write_standard(res)
    recs, bad = index.records(res)
    walked = load_paths([res])
    assert bad == [] and sorted(map(repr, recs)) == sorted(map(repr, walked.records))
    series = index.history(res)
    h200 = next(s for s in series if (s.hardware, s.backend, s.workload) == ("nvidia-h200-x8", "torch", "cv/digits_cnn"))
    assert [p.tta_olympic_s for p in h200.points] == [6.0, 12.0]  # the old faster commit, then the new one
    assert next(s for s in series if s.backend == "megatron").points[0].tta_olympic_s == float("inf")


def test_cli_index_and_archive(tmp_path):
    res = tmp_path / "results"
    write_standard(res)
    runner = CliRunner()
    r = runner.invoke(app, ["results", "index", "--results", str(res), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["runs"] == 29
    r = runner.invoke(app, ["results", "archive", "--results", str(res), "--before", "yesterday"])
    assert r.exit_code == 2 and "--before" in r.output
    r = runner.invoke(app, ["results", "index", "--results", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "--results" in r.output
    r = runner.invoke(app, ["results", "archive", "--results", str(res), "--before", "2026-11-05"])
    assert r.exit_code == 0 and "archived 3 result(s)" in r.output, r.output
    assert (res / "archive" / "2026-11.zip").is_file()
    r = runner.invoke(app, ["results", "show", str(res), "--json"])
    assert r.exit_code == 0 and len(json.loads(r.stdout)) == 29


def test_readers_fall_back_to_the_files_when_the_index_is_off(tmp_path, monkeypatch):
    res = tmp_path / "results"
    write_standard(res)
    monkeypatch.setenv(index.ENV_OFF, "0")
    assert not index.enabled(res)
    build_site(res, tmp_path / "site")
    assert not (res / ".index").exists()
    assert os.path.isfile(tmp_path / "site" / "index.html")


def test_unchanged_folders_are_not_statted_file_by_file_and_rescan_finds_an_in_place_edit(tmp_path):
    res = tmp_path / "results"
    write_standard(res)
    old = 1_700_000_000
    for folder in [res, *[p for p in res.rglob("*") if p.is_dir()]]:
        os.utime(folder, (old, old))  # not racily recent: the folder mtimes can be trusted
    assert index_store.update(res).runs == 29
    # an edit in place leaves its folder's mtime alone: the plain update keeps the recorded row ...
    victim = next(p for p in res.rglob("*.json") if ".index" not in p.parts)
    victim.write_text("{broken", encoding="utf-8")
    os.utime(victim.parent, (old, old))
    assert index_store.update(res).read == 0
    # ... and --rescan stats every file and finds it
    again = index_store.update(res, rescan=True)
    assert (again.read, again.errors, again.runs) == (1, 1, 28)
    # a new file changes its folder's mtime, so it is found without --rescan
    write_result(res, site_result("cv/digits_cnn", "nvidia-h200-x8", "torch", seed=7, started_at=T0 + timedelta(days=30)))
    assert index_store.update(res).read == 1


def test_a_damaged_archive_is_named_and_the_other_results_still_read(tmp_path):
    res = tmp_path / "results"
    write_standard(res)
    assert index_pack.pack(res, datetime(2026, 11, 5, tzinfo=UTC)).results == 3
    (res / "archive" / "2026-11.zip").write_bytes(b"not a zip at all")
    ix = index.load(res)
    assert len(ix.entries) == 26
    assert len(ix.errors) == 1 and "2026-11.zip: not a readable zip archive" in ix.errors[0]
    assert index.load(res).errors == ix.errors  # stays reported, and the index stays usable

"""Issue 35, items 1-4: the results tree. One walk for every command (suite/results/tree.py): no symlink is
followed out of the folder given and nothing but a regular file inside it is moved, deleted or published; a name
that is not UTF-8 is skipped and named; files take the user's umask; an index this user cannot write is left
for the file walk, with one warning, by every reader."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.backend_util import ROOT, env
from support.unprivileged import unprivileged as _drop_caps

from benchmarks.sim.results import site_result
from suite.results import baselines as bl
from suite.results.index import store as index_store
from suite.results.noise_floor import AAMeasurement, NoiseFloor, write_floor
from suite.results.record import write_result, write_run
from suite.site.build import build_site

SECRET = "TRAINBENCH_TEST_TOKEN=hunter2-not-to-be-published"
JAN = datetime(2026, 1, 5, tzinfo=UTC)
N = 5  # seeds a side: enough for compare to reach a verdict at alpha 0.05


def _cli(*args: str, unprivileged: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "suite.cli", *args]
    return subprocess.run(_drop_caps(argv) if unprivileged else argv, capture_output=True, text=True, timeout=300,
                          env=env(COLUMNS="200"), cwd=ROOT)


def _seeds(root: Path, n: int = N, **kw) -> list[Path]:
    return [write_result(root, site_result(seed=s, **kw)) for s in range(n)]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- item 1: symlinks in results/ ------------------------------------------------------------------------------


@pytest.fixture
def linked(tmp_path: Path) -> dict[str, Path]:
    """results/ with N runs of its own (one naming a log that is a symlink to a secret), a symlinked folder
    results/ext -> other/ holding 3 runs of another workload, and a result file that is a symlink out."""
    res, other, secret = tmp_path / "results", tmp_path / "other", tmp_path / "environ"
    secret.write_text(SECRET + "\n")
    own = _seeds(res, N - 1, started_at=JAN)
    with_log = write_result(res, site_result(seed=N - 1, started_at=JAN, mllog="run.mllog"))
    (with_log.parent / "run.mllog").symlink_to(secret)
    _seeds(other, 3, workload="cv/elsewhere", started_at=JAN)
    (res / "ext").symlink_to(other, target_is_directory=True)
    stray = write_result(tmp_path / "stray", site_result(seed=9, workload="cv/stray", started_at=JAN))
    (own[0].parent / "linked.json").symlink_to(stray)
    return {"res": res, "other": other, "secret": secret, "log": with_log.parent / "run.mllog",
            "stray": stray.parent, "tmp": tmp_path}


def _names_the_links(stderr: str, t: dict[str, Path]) -> None:
    assert "Traceback" not in stderr, stderr[-3000:]
    assert f"warning: skipped {t['res'] / 'ext'}: a symlink out of the results folder" in stderr, stderr
    assert "linked.json: a symlink out of the results folder" in stderr, stderr


def test_archive_packs_no_symlinked_log_and_moves_nothing_from_a_linked_folder(linked):
    t = linked
    outside = _snapshot(t["other"]) | {f"stray/{k}": v for k, v in _snapshot(t["stray"]).items()}
    p = _cli("results", "archive", "--results", str(t["res"]), "--before", "2026-06-01")
    assert p.returncode == 0, p.stderr
    _names_the_links(p.stderr, t)
    assert "run.mllog: the MLLOG log named by a result is a symlink" in p.stderr
    assert f"archived {N} result(s) and 0 log(s)" in p.stdout
    # nothing outside the tree was moved or deleted; the symlinked log is left where it was
    assert _snapshot(t["other"]) | {f"stray/{k}": v for k, v in _snapshot(t["stray"]).items()} == outside
    assert t["log"].is_symlink() and t["secret"].read_text().startswith(SECRET)
    (zpath,) = (t["res"] / "archive").glob("*.zip")
    with zipfile.ZipFile(zpath) as z:
        names = z.namelist()
        assert len(names) == N and all(n.startswith("nvidia-h200-x8/cv/digits_cnn/") for n in names), names
        assert not any(b"hunter2" in z.read(n) for n in names)
    site = t["tmp"] / "site"
    p = _cli("site", "build", "--results", str(t["res"]), "--out", str(site), "--baselines", str(t["tmp"] / "none"))
    assert p.returncode == 0 and f"from {N} results" in p.stdout, p.stdout + p.stderr
    assert not any(b"hunter2" in f.read_bytes() for f in site.rglob("*") if f.is_file())


def test_site_publishes_only_regular_files_inside_the_results(linked):
    t = linked
    site = t["tmp"] / "site"
    p = _cli("site", "build", "--results", str(t["res"]), "--out", str(site), "--baselines", str(t["tmp"] / "none"))
    assert p.returncode == 0, p.stderr
    _names_the_links(p.stderr, t)
    assert f"from {N} results (1 workloads)" in p.stdout, p.stdout
    assert len(list((site / "r").glob("*.json"))) == N
    assert not any(b"hunter2" in f.read_bytes() for f in site.rglob("*") if f.is_file())
    assert not any("elsewhere" in f.name or "stray" in f.name for f in site.rglob("*"))


@pytest.mark.parametrize("command", ["validate", "index", "show", "compare", "history", "promote"])
def test_every_reader_leaves_out_what_a_symlink_leads_to_and_says_so(linked, command):
    t = linked
    res, tmp = str(t["res"]), t["tmp"]
    cand = tmp / "cand"
    _seeds(cand, N, started_at=JAN)
    argv = {"validate": ["results", "validate", res], "index": ["results", "index", "--results", res, "--json"],
            "show": ["results", "show", res, "--json"],
            "compare": ["compare", "-b", res, "-c", str(cand), "--format", "json"],
            "history": ["history", "--results", res, "--json"],
            "promote": ["baseline", "promote", res, "--to", str(tmp / "bl")]}[command]
    p = _cli(*argv)
    _names_the_links(p.stderr, t)
    assert p.returncode == 0, p.stdout + p.stderr
    runs = {"validate": lambda: int(p.stdout.split(" valid")[0].split()[-1]),
            "index": lambda: json.loads(p.stdout)["runs"],
            "show": lambda: len(json.loads(p.stdout)),
            "compare": lambda: json.loads(p.stdout)["summary"]["baseline_files"],
            "history": lambda: json.loads(p.stdout)["series"],
            "promote": lambda: len(list((tmp / "bl").rglob("*.json")))}[command]()
    assert runs == {"promote": 1, "history": 3}.get(command, N), p.stdout  # history: 3 metrics of 1 workload
    assert "elsewhere" not in p.stdout and "stray" not in p.stdout


def test_list_matrix_does_not_count_a_result_behind_a_link_out(tmp_path):
    from suite.cli.notes import hardware_tested

    res, other = tmp_path / "results", tmp_path / "other"
    folder = other / "ascend-910b-x8" / "cv" / "digits_cnn" / "npu"
    folder.mkdir(parents=True)
    (folder / "20261203T000000Z-abcd1234.json").write_text("{}")
    res.mkdir()
    (res / "ascend-910b-x8").symlink_to(other / "ascend-910b-x8", target_is_directory=True)
    with pytest.warns(UserWarning, match="a symlink out of the results folder"):
        assert hardware_tested(res) == set()
    assert hardware_tested(other) == {("cv/digits_cnn", "npu")}


def test_a_result_swapped_for_a_symlink_after_it_was_indexed_is_not_published_through_it(tmp_path, monkeypatch):
    from suite.results import index

    res, secret = tmp_path / "results", tmp_path / "environ"
    secret.write_text(SECRET + "\n")
    paths = _seeds(res, 2)
    index_store.update(res)
    paths[0].unlink()
    paths[0].symlink_to(secret)  # between the index's read and the site's copy
    monkeypatch.setattr(index, "update", lambda root, rescan=False: index_store.UpdateReport(index_store.db_path(root)))
    out = tmp_path / "site"
    assert build_site(res, out, use_index=True).results == 2
    assert not any(b"hunter2" in f.read_bytes() for f in out.rglob("*") if f.is_file())
    assert len(list((out / "r").glob("*.json"))) == 2


def test_a_link_inside_the_tree_is_passed_over_quietly_and_a_linked_archive_folder_is_refused(tmp_path):
    res = tmp_path / "results"
    own = _seeds(res, 3, started_at=JAN)
    (res / "alias").symlink_to(own[0].parent, target_is_directory=True)  # read where it is: no double count
    p = _cli("results", "validate", str(res))
    assert p.returncode == 0 and "3 valid" in p.stdout and "warning" not in p.stderr, p.stdout + p.stderr
    elsewhere = tmp_path / "zips"
    elsewhere.mkdir()
    (res / "archive").symlink_to(elsewhere, target_is_directory=True)
    p = _cli("results", "archive", "--results", str(res), "--before", "2026-06-01")
    assert p.returncode == 2 and "archives are written only inside the results folder" in p.stderr, p.stderr
    assert list(elsewhere.iterdir()) == [] and all(f.is_file() for f in own)


def test_an_index_folder_linked_to_another_disk_is_used_without_a_warning(tmp_path):
    res, fast = tmp_path / "results", tmp_path / "fast"
    _seeds(res)
    fast.mkdir()
    (res / ".index").symlink_to(fast, target_is_directory=True)  # the walk's one exception: never results
    for argv in (["results", "index", "--results", str(res)], ["results", "validate", str(res)]):
        p = _cli(*argv)
        assert p.returncode == 0 and "warning" not in p.stderr, p.stdout + p.stderr
    assert (fast / "results.duckdb").is_file()


# ---- item 2: modes -----------------------------------------------------------------------------------------------


@pytest.fixture
def umask_set():
    old = os.umask(0o022)
    os.umask(old)
    yield lambda m: os.umask(m)
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o077], ids=["umask022", "umask077"])
def test_result_log_and_baseline_files_take_the_umask(tmp_path, umask_set, mask):
    umask_set(mask)
    want = 0o666 & ~mask
    res = tmp_path / "results"
    paths = [write_run(res, site_result(seed=s), mllog_text=":::MLLOG {}\n") for s in range(3)]
    loaded = bl.load_paths([res])
    (built,) = bl.build_baselines(loaded.records, min_seeds=3, promoted_by_git_sha=None)
    base = bl.write_baseline(tmp_path / "baselines", built)
    floor = write_floor(tmp_path / "baselines", NoiseFloor(
        hardware="h", workload="cv/x", backend="torch", noise_floor=0.01, measured_at="2026-01-05T00:00:00Z",
        aa=AAMeasurement(ratio=1.0, ci_low=0.99, ci_high=1.01, runs_per_side=4, steps_per_run=20)))
    files = [*paths, *(p.with_suffix(".mllog") for p in paths), base, floor]
    assert {oct(stat.S_IMODE(f.stat().st_mode)) for f in files} == {oct(want)}


def test_site_copies_take_the_sites_mode_and_link_only_when_it_is_the_same(tmp_path, umask_set):
    res, out = tmp_path / "results", tmp_path / "site"
    umask_set(0o077)  # results written private
    private = _seeds(res, 3)
    umask_set(0o022)  # the site built to be published
    build_site(res, out)
    copies = sorted((out / "r").glob("*.json"))
    assert len(copies) == 3
    for c in copies:
        assert stat.S_IMODE(c.stat().st_mode) == 0o644, oct(c.stat().st_mode)
        assert not any(os.path.samefile(c, p) for p in private)  # a copy: the result itself stays 0600
    assert {stat.S_IMODE(p.stat().st_mode) for p in private} == {0o600}
    public = _seeds(res, 2, started_at=JAN)  # now written 0644: the same mode as the site's, so linked
    build_site(res, out)
    linked = [c for c in (out / "r").glob("*.json") if any(os.path.samefile(c, p) for p in public)]
    assert len(linked) == 2


# ---- item 3: names that are not UTF-8 -------------------------------------------------------------------------


def test_names_that_are_not_utf8_are_skipped_and_named_by_every_command(tmp_path):
    res, cand = tmp_path / "results", tmp_path / "cand"
    own = _seeds(res, N, started_at=JAN)
    _seeds(cand, N, started_at=JAN)
    odd = os.path.join(os.fsencode(res), b"caf\xe9")
    os.makedirs(odd)
    write_result(Path(os.fsdecode(odd)), site_result(seed=7, started_at=JAN))
    shutil.copy(own[0], os.path.join(os.fsencode(own[0].parent), b"r\xe9sult.json"))
    named = [f"{res}/caf\\xe9: its name is not UTF-8", f"{own[0].parent}/r\\xe9sult.json: its name is not UTF-8"]
    site = tmp_path / "site"
    for argv, rc, says in [
        (["results", "validate", str(res)], 0, f"{N} valid"),
        (["results", "index", "--results", str(res)], 0, f"{N} runs"),
        (["compare", "-b", str(res), "-c", str(cand)], 0, "no (significant) change"),
        (["history", "--results", str(res)], 0, "change point(s)"),
        (["site", "build", "--results", str(res), "--out", str(site), "--baselines", str(tmp_path / "no")], 0,
         f"from {N} results"),
        (["baseline", "promote", str(res), "--to", str(tmp_path / "bl")], 0, f"{N} seeds"),
        (["results", "archive", "--results", str(res), "--before", "2026-06-01"], 0, f"archived {N} result(s)"),
    ]:
        p = _cli(*argv)
        assert p.returncode == rc and "Traceback" not in p.stderr, (argv, p.stdout, p.stderr[-3000:])
        assert says in p.stdout + p.stderr, (argv, p.stdout, p.stderr)
        for n in named:
            assert p.stderr.count(n) == 1, (argv, n, p.stderr)
    assert os.path.isdir(odd) and os.listdir(odd)  # left where it was


# ---- item 4: an index this user cannot write ---------------------------------------------------------------------


def _readers(res: Path, tmp: Path) -> list[tuple[list[str], str]]:
    cand = tmp / "cand"
    if not cand.exists():
        _seeds(cand)
    return [(["compare", "-b", str(res), "-c", str(cand)], "no (significant) change"),
            (["site", "build", "--results", str(res), "--out", str(tmp / "site"), "--baselines", str(tmp / "no")],
             f"from {N} results"),
            (["history", "--results", str(res)], "change point(s) in 3 series"),
            (["results", "show", str(res)], "nvidia-h200-x8")]


def _falls_back(p: subprocess.CompletedProcess[str], says: str) -> None:
    assert p.returncode == 0 and "Traceback" not in p.stderr, (p.stdout, p.stderr[-3000:])
    assert says in p.stdout + p.stderr, (p.stdout, p.stderr)
    assert p.stderr.count("cannot use the results index") == 1, p.stderr
    assert "reading the files instead" in p.stderr


def test_every_reader_walks_the_files_when_index_is_a_file(tmp_path):
    res = tmp_path / "results"
    _seeds(res)
    (res / ".index").write_text("not a folder\n")
    for argv, says in _readers(res, tmp_path):
        _falls_back(_cli(*argv), says)
    assert (res / ".index").read_text() == "not a folder\n"


PROBE = "import sys\ntry:\n    open(sys.argv[1], 'r+b').close()\n    print('writable')\nexcept PermissionError:\n    print('denied')\n"


@pytest.mark.parametrize("theirs", ["lock-and-db", "db-only"])
def test_every_reader_walks_the_files_when_another_users_index_is_not_writable(tmp_path, theirs):
    res = tmp_path / "results"
    _seeds(res)
    assert _cli("results", "index", "--results", str(res)).returncode == 0
    folder = res / ".index"
    for f in folder.iterdir():  # another user's files, as this (unprivileged) user sees them
        f.chmod(0o666 if f.name == "lock" and theirs == "db-only" else 0o444)
    folder.chmod(0o777)  # in a folder shared with the group: only the files are not ours to write
    before = _snapshot(folder)
    probe = subprocess.run(_drop_caps([sys.executable, "-c", PROBE, str(folder / "results.duckdb")]),
                           capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip() == "denied", probe  # the modes really apply to the child: the test is not vacuous
    write_result(res, site_result(seed=9, started_at=JAN))  # newer than the index: the walk must see it
    for argv, says in _readers(res, tmp_path):
        p = _cli(*argv, unprivileged=True)
        _falls_back(p, says.replace(f"from {N} results", f"from {N + 1} results"))
    assert _snapshot(folder) == before  # the other user's index is left as it was

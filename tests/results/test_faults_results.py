"""Bad result files (corrupt, truncated, hostile, from another schema version): named, skipped, never a crash;
older schema versions are migrated on read, newer ones refused with a message that says what to do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.faults import env, sh
from support.unprivileged import unprivileged

from benchmarks.sim.results import make_result
from suite.results import record as results
from suite.results.record import ResultError, load_results, parse_result, read_result, write_result


def _good_text() -> str:
    return make_result().model_dump_json(indent=1)


def _data(**changes) -> str:
    d = json.loads(_good_text())
    d.update(changes)
    return json.dumps(d)


def _bad_files(folder: Path) -> dict[str, str]:
    """file name -> the words `results validate` must say about it."""
    good = _good_text()
    cases: dict[str, tuple[bytes | str, str]] = {
        "truncated.json": (good[: len(good) // 2], "not valid JSON (truncated or corrupt?)"),
        "empty.json": ("", "not valid JSON"),
        "binary.json": (bytes(range(256)) * 4, "cannot read"),
        "array.json": ("[1, 2, 3]", "top level must be a JSON object"),
        "wrong-type.json": (_data(steps="many"), "steps: Input should be a valid integer"),
        "unknown-field.json": (_data(sneaky=1), "sneaky: Extra inputs are not permitted"),
        "bad-status.json": (_data(status="won"), "status: Input should be"),
        "newer.json": (_data(schema_version=99), "schema_version 99 is newer than this trainbench understands (3)"),
        "no-version.json": (json.dumps({k: v for k, v in json.loads(good).items() if k != "schema_version"}),
                            "schema_version: missing or not an integer"),
        "bool-version.json": (_data(schema_version=True), "schema_version: missing or not an integer"),
        "string-version.json": (_data(schema_version="1"), "schema_version: missing or not an integer"),
        "old-unknown.json": (_data(schema_version=-3), "no migration from schema_version -3"),
        "deep.json": ("[" * 200_000, "nested too deeply"),
        "long-number.json": ('{"schema_version": ' + "9" * 5000 + "}", "not valid JSON"),
        # a hostile path (folder `[red]x[`, file `red].json`): rich once read it as markup and crashed
        "[red]x[/red].json": ("{", "not valid JSON"),
    }
    (folder / "[red]x[").mkdir()
    for name, (content, _) in cases.items():
        p = folder / name
        p.write_bytes(content) if isinstance(content, bytes) else p.write_text(content)
    huge = folder / "huge.json"  # sparse: 100 MB on paper, refused by its size before a byte is read
    with open(huge, "wb") as f:
        f.truncate(100 * 1024 * 1024)
    out = {name: words for name, (_, words) in cases.items()}
    out["huge.json"] = "larger than any real result"
    return out


def test_results_validate_names_every_bad_file_and_only_those(tmp_path):
    good = write_result(tmp_path, make_result())
    bad = _bad_files(tmp_path)
    (tmp_path / ".tmp-abc.part").write_text("{")  # a kill mid-write leaves this: not a result, ignored
    (tmp_path / "folder.json").mkdir()  # not a file
    (tmp_path / "dangling.json").symlink_to(tmp_path / "nowhere")
    p = sh("results", "validate", str(tmp_path))
    assert p.returncode == 1
    assert f"1 valid, {len(bad)} invalid result file(s)" in p.stdout
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("bad ")]
    assert len(lines) == len(bad)
    for name, words in bad.items():
        (line,) = [ln for ln in lines if f"/{name}: " in ln]
        assert words in line, (name, line)
    assert str(good) not in p.stderr
    assert "Traceback" not in p.stderr


def test_results_show_skips_bad_files_and_says_so(tmp_path):
    write_result(tmp_path, make_result())
    bad = _bad_files(tmp_path)
    p = sh("results", "show", str(tmp_path), "--json")
    assert p.returncode == 0 and len(json.loads(p.stdout)) == 1
    assert p.stderr.count("skipped bad file") == len(bad)


def test_loader_names_bad_files_and_strict_raises(tmp_path):
    write_result(tmp_path, make_result())
    bad = _bad_files(tmp_path)
    loaded = load_results(tmp_path)
    assert len(loaded.results) == 1 and len(loaded.errors) == len(bad)
    with pytest.raises(ResultError):
        load_results(tmp_path, strict=True)


def test_hostile_strings_in_a_valid_result_are_data_not_markup(tmp_path):
    """A result is data from someone else: brackets in it must not be read as rich markup (it crashed the CLI)."""
    write_result(tmp_path, make_result(workload="cv/[/red]x", backend="[bold]torch", error="[/] <script>x</script>",
                                       final_metrics={"[/acc]": 0.5}))
    p = sh("results", "show", str(tmp_path))
    assert p.returncode == 0 and "Traceback" not in p.stderr
    assert "[bold]torch" in p.stdout


READ_AS_CHILD = r"""
import json, sys
from pathlib import Path
from suite.results.record import load_results
bad = Path(sys.argv[2])
try:
    bad.read_bytes()
    denied = False
except PermissionError:
    denied = True
loaded = load_results(Path(sys.argv[1]))
print(json.dumps({"denied": denied, "good": len(loaded.results), "errors": loaded.errors}))
"""


def test_unreadable_file_is_named(tmp_path):
    good = write_result(tmp_path, make_result(run_id="readable"))
    bad = write_result(tmp_path, make_result(run_id="unreadable"))
    bad.chmod(0)
    proc = subprocess.run(unprivileged([sys.executable, "-c", READ_AS_CHILD, str(tmp_path), str(bad)]),
                          capture_output=True, text=True, env=env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["denied"]  # the file mode really applied to the child: the test is not vacuous
    assert out["good"] == 1 and len(out["errors"]) == 1, out
    assert "cannot read" in out["errors"][0] and str(bad) in out["errors"][0] and str(good) not in out["errors"][0]


# ---- schema versions ---------------------------------------------------------------------------------------


def _v0(**extra) -> dict:
    """A synthetic schema-0 result: `tta_s` for time_to_target_s and `converged` for `reached`."""
    d = json.loads(_good_text())
    d["schema_version"] = 0
    d["tta_s"] = d.pop("time_to_target_s")
    d["status"] = "converged"
    d.update(extra)
    return d


def _migrate_v0(d: dict) -> dict:
    d = dict(d)
    d["time_to_target_s"] = d.pop("tta_s")
    d["status"] = {"converged": "reached"}.get(d["status"], d["status"])
    return d


def test_older_schema_is_migrated_on_read_and_the_file_is_left_alone(tmp_path, monkeypatch):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(_v0()))
    before = path.read_bytes()
    with pytest.raises(ResultError, match="no migration from schema_version 0"):
        read_result(path)  # without a registered migration it is refused, by name
    monkeypatch.setitem(results.MIGRATIONS, 0, _migrate_v0)
    r = read_result(path)
    assert r.schema_version == results.SCHEMA_VERSION and r.status == "reached" and r.time_to_target_s == 4.2
    assert path.read_bytes() == before  # migrated in memory: result files are append-only, never rewritten
    assert len(load_results(tmp_path).results) == 1


def test_a_migration_that_chokes_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setitem(results.MIGRATIONS, 0, _migrate_v0)
    d = _v0()
    del d["tta_s"]
    with pytest.raises(ResultError, match=r"old\.json: migration from schema_version 0 failed: KeyError"):
        parse_result(json.dumps(d), "old.json")
    monkeypatch.setitem(results.MIGRATIONS, 0, lambda d: None)
    with pytest.raises(ResultError, match="did not return an object"):
        parse_result(json.dumps(_v0()), "old.json")


def test_newer_schema_is_refused_with_what_to_do(tmp_path):
    (tmp_path / "new.json").write_text(_data(schema_version=results.SCHEMA_VERSION + 1))
    p = sh("results", "validate", str(tmp_path))
    assert p.returncode == 1
    assert "is newer than this trainbench understands" in p.stderr and "upgrade trainbench to read it" in p.stderr


def test_non_finite_numbers_round_trip(tmp_path):
    r = make_result(final_metrics={"loss": float("nan"), "ppl": float("inf")}, train_s=float("nan"))
    back = read_result(write_result(tmp_path, r))
    assert back.final_metrics["ppl"] == float("inf") and back.train_s != back.train_s

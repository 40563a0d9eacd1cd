"""Issue 17 item 6, one reader, one verdict: every reader of the results folder (validate, show, compare
lean and --validate, through the index and over the files, promote, the site, history, the index) accepts or
skips the same odd file alike; and compare's lean msgspec mirror (suite/results/lean.py) declares every field
of the Result schema, at least as strictly, so it can never accept a file the full schema refuses."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from benchmarks.sim.results import site_result
from suite.compare import history
from suite.results import baselines as bl
from suite.results import index, runfiles
from suite.results import lean as result_lean
from suite.results.record import (
    EvalPoint,
    GitInfo,
    Goodput,
    HardwareInfo,
    PeakInfo,
    Result,
    ResultError,
    load_results,
    parse_result,
    write_result,
)
from suite.site.build import build_site

GOOD = site_result(seed=0).model_dump(mode="json")
DEEP = "[" * 100_000 + "]" * 100_000


def _set(*path: Any, value: Any) -> Callable[[dict], dict]:
    def edit(d: dict) -> dict:
        node = d
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return d
    return edit


def _drop(*path: str) -> Callable[[dict], dict]:
    def edit(d: dict) -> dict:
        node = d
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
        return d
    return edit


def _json(edit: Callable[[dict], dict]) -> Callable[[], str]:
    return lambda: json.dumps(edit(copy.deepcopy(GOOD)))


def _raw(old: str, new: str) -> Callable[[], str]:
    """A text edit of the good file, for JSON that json.dumps of a dict cannot make."""
    return lambda: json.dumps(GOOD).replace(old, new, 1)


# (name, the odd file's text, accepted?) -- the verdict the full schema gives, which every reader must give
ODD: list[tuple[str, Callable[[], str], bool]] = [
    ("a good file", _json(lambda d: d), True),
    ("unknown top-level field", _json(_set("surprise", value=1)), False),
    ("unknown field in hardware", _json(_set("hardware", "surprise", value=1)), False),
    ("unknown field in git", _json(_set("git", "surprise", value="x")), False),
    ("unknown field in an eval point", _json(_set("eval_curve", 0, "surprise", value=1)), False),
    ("unknown field in peak", _json(_set("peak", "surprise", value=1)), False),
    ("unknown key inside the free-form config", _json(_set("config", "surprise", value=1)), True),
    ('"mfu": "NaN" (the writer\'s NaN)', _json(_set("mfu", value="NaN")), True),
    ('"mfu": "Infinity"', _json(_set("mfu", value="Infinity")), True),
    ("a bare NaN literal", _raw('"mfu": 0.41', '"mfu": NaN'), True),
    ("a lone surrogate in a string", _raw('"hostname": "bench-01"', '"hostname": "bench-\\ud800"'), False),
    ("a surrogate pair (an emoji)", _raw('"hostname": "bench-01"', '"hostname": "bench-\\ud83d\\ude00"'), True),
    ("a newer schema", _json(_set("schema_version", value=99)), False),
    ("an older schema", _json(_set("schema_version", value=1)), True),
    ("schema_version as a string", _json(_set("schema_version", value="2")), False),
    ("a numeric string for an int", _json(_set("steps", value="120")), True),
    ("a fraction for an int", _json(_set("steps", value=1.5)), False),
    ("an integer beyond 64 bits", _json(_set("samples", value=10**30)), True),
    ("a string for the eval curve", _json(_set("eval_curve", value="x")), False),
    ("a number among the warnings", _json(_set("warnings", value=[1])), False),
    ("a number as a software version", _json(_set("software", "torch", value=2)), False),
    ("an unknown status", _json(_set("status", value="weird")), False),
    ("an unknown mode", _json(_set("mode", value="weird")), False),
    ("no total_s", _json(_drop("total_s")), False),
    ("no config", _json(_drop("config")), False),
    ("no hardware.cpu_cores", _json(_drop("hardware", "cpu_cores")), False),
    ("git: null", _json(_set("git", value=None)), False),
    ("a year-1 start", _json(_set("started_at", value="0001-01-01T00:00:00Z")), False),
    ("a start as a unix time string", _json(_set("started_at", value="1790000000")), True),
    ("a start as a date", _json(_set("started_at", value="2026-11-01")), True),
    ("a start in a compact ISO form pydantic refuses", _json(_set("started_at", value="20261101T120000")), False),
    ("deep nesting in the config", _raw('"threads": 1', '"threads": ' + DEEP), False),
    ("a JSON list", lambda: "[1, 2]", False),
    ("truncated", lambda: json.dumps(GOOD)[:-40], False),
]


def _named(errors: list[str], files: dict[str, Path]) -> set[str]:
    """The odd files a reader named as bad (every message starts with or holds the file's path)."""
    return {name for name, path in files.items() if any(path.name in e for e in errors)}


def _validate(root: Path, files: dict[str, Path], tmp: Path) -> set[str]:
    loaded = load_results(root)  # `trainbench results validate` (and `results show` without the index)
    assert len(loaded.results) + len(loaded.errors) == len(files) + 1
    return _named(loaded.errors, files)


def _index(root: Path, files: dict[str, Path], tmp: Path) -> set[str]:
    loaded = index.load(root)  # the index; `results show`, `site build` and compare read through it
    assert len(loaded.results) + len(loaded.errors) == len(files) + 1
    return _named(loaded.errors, files)


def _compare(validate: bool, use_index: bool) -> Callable[[Path, dict[str, Path], Path], set[str]]:
    def reader(root: Path, files: dict[str, Path], tmp: Path) -> set[str]:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(index.ENV_OFF, "1" if use_index else "0")
            loaded = bl.load_paths([root], validate=validate)  # compare (--validate); promote (validate=True)
        assert len(loaded.records) + len(loaded.errors) == len(files) + 1
        return _named(loaded.errors, files)
    return reader


def _compare_each_file(root: Path, files: dict[str, Path], tmp: Path) -> set[str]:
    bad = set()
    for name, path in files.items():
        try:  # `trainbench compare -c FILE`: the lean reader on the file alone
            assert isinstance(runfiles.read_file(path), runfiles.RunRecord)
        except ResultError:
            bad.add(name)
    return bad


def _site(use_index: bool) -> Callable[[Path, dict[str, Path], Path], set[str]]:
    def reader(root: Path, files: dict[str, Path], tmp: Path) -> set[str]:
        report = build_site(root, tmp / f"site-{use_index}", use_index=use_index)
        assert report.results + len(report.skipped) == len(files) + 1
        return _named(report.skipped, files)
    return reader


def _history(root: Path, files: dict[str, Path], tmp: Path) -> set[str]:
    _, errors = history.series(root)
    return _named(errors, files)


READERS: dict[str, Callable[[Path, dict[str, Path], Path], set[str]]] = {
    "results validate": _validate,
    "index": _index,
    "compare (index)": _compare(False, True),
    "compare (files)": _compare(False, False),
    "compare --validate / promote (index)": _compare(True, True),
    "compare --validate / promote (files)": _compare(True, False),
    "compare on each file": _compare_each_file,
    "site (index)": _site(True),
    "site (files)": _site(False),
    "history": _history,
}


def test_every_reader_gives_each_odd_file_the_same_verdict(tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_result(root, site_result(seed=1, started_at=datetime(2026, 10, 1, tzinfo=UTC)))
    files: dict[str, Path] = {}
    for i, (name, text, _) in enumerate(ODD):
        files[name] = path = root / "odd" / f"odd-{i:02d}.json"
        path.parent.mkdir(exist_ok=True)
        body = text().replace(f'"run_id": "{GOOD["run_id"]}"', f'"run_id": "odd{i:02d}"', 1)  # one run per file
        path.write_text(body, encoding="utf-8", errors="surrogatepass")
    expected = {name for name, _, accepted in ODD if not accepted}
    verdicts = {reader: read(root, files, tmp_path) for reader, read in READERS.items()}
    wrong = {reader: {"accepted, should skip": sorted(expected - bad), "skipped, should accept": sorted(bad - expected)}
             for reader, bad in verdicts.items() if bad != expected}
    assert not wrong, json.dumps(wrong, indent=1)


# ---- the lean mirror is the schema, field by field ---------------------------------------------------------

MIRRORS: list[tuple[type[BaseModel], type[msgspec.Struct]]] = [
    (Result, result_lean.LeanResult), (HardwareInfo, result_lean.LeanHardware), (GitInfo, result_lean.LeanGit),
    (PeakInfo, result_lean.LeanPeak), (EvalPoint, result_lean.LeanEvalPoint), (Goodput, result_lean.LeanGoodput),
]


@pytest.mark.parametrize(("model", "struct"), MIRRORS, ids=[m.__name__ for m, _ in MIRRORS])
def test_the_lean_mirror_declares_every_field_and_the_same_required_ones(model, struct) -> None:
    fields = msgspec.structs.fields(struct)
    assert {f.name for f in fields} == set(model.model_fields), "add the new field to suite/results/lean.py"
    expected = {n for n, f in model.model_fields.items() if f.is_required()}
    if struct is result_lean.LeanResult:
        expected.add("schema_version")  # a default in the model, but migrate() requires it in every file
    assert {f.name for f in fields if f.required} == expected
    assert struct.__struct_config__.forbid_unknown_fields, f"{model.__name__} forbids unknown fields"


# hypothesis: random edits of a good file; the lean reader (with its fall-back) and the full schema agree
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5)
    | st.sampled_from(["NaN", "Infinity", "2026-11-01T12:00:00Z", "reached", "tta", "12"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:2]):
            out += _paths(v, (*prefix, i))
    return out


PATHS = [p for p in _paths(GOOD) if p and p[0] != "config"] + [("config",), ("config", "spec")]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), value=VALUES, add=st.booleans())
def test_the_lean_reader_and_the_schema_agree_on_random_edits(tmp_path_factory, path, value, add) -> None:
    d = copy.deepcopy(GOOD)
    node = d
    for key in path[:-1]:
        node = node[key]
    if add and isinstance(node, dict):
        node[f"new_{path[-1]}"] = value  # an unknown field beside a known one
    else:
        node[path[-1]] = value
    text = json.dumps(d)
    try:
        parse_result(text, "x")
        full = True
    except ResultError:
        full = False
    f = tmp_path_factory.mktemp("fuzz") / "r.json"
    f.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        lean = isinstance(runfiles.read_file(f), runfiles.RunRecord)
    except ResultError:
        lean = False
    assert lean == full, (path, value, add)

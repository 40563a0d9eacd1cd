"""Result files: schema round trip, atomic append-only writes, a kill mid-write leaves no partial file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from suite import harness
from suite.results.record import (
    SCHEMA_VERSION,
    ResultError,
    load_results,
    parse_result,
    read_result,
    result_files,
    write_atomic,
    write_result,
)
from suite.specload import load_spec


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    from support.tests_paths import DIGITS

    spec = load_spec(DIGITS, variant="tiny")
    r, _ = harness.run(harness.RunRequest(spec=spec, results_dir=None, threads=1))
    return r


def test_round_trip_and_layout(tmp_path, result):
    path = write_result(tmp_path, result)
    rel = path.relative_to(tmp_path).parts
    assert rel[0] == result.hardware.slug and rel[1:4] == ("cv", "digits_cnn", "torch")
    assert rel[4].endswith(f"-{result.run_id}.json")
    assert read_result(path) == result
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION


def test_never_overwrites(tmp_path, result):
    first = write_result(tmp_path, result.model_copy())
    second = write_result(tmp_path, result.model_copy())  # same stamp, same run id -> a new id, a new file
    assert first != second and first.exists() and second.exists()
    with pytest.raises(FileExistsError):
        write_atomic(first, "{}")
    assert read_result(first).run_id != read_result(second).run_id


def test_validate_names_bad_files(tmp_path, result):
    write_result(tmp_path, result)
    (tmp_path / "trunc.json").write_text(result.model_dump_json()[:100])
    (tmp_path / "wrong.json").write_text(json.dumps({"schema_version": 1, "run_id": 3}))
    loaded = load_results(tmp_path)
    assert len(loaded.results) == 1
    assert len(loaded.errors) == 2
    assert any("trunc.json: not valid JSON" in e for e in loaded.errors)
    assert any("wrong.json" in e and "started_at" in e for e in loaded.errors)
    with pytest.raises(ResultError):
        load_results(tmp_path, strict=True)


def test_newer_schema_is_refused_with_a_clear_message(result):
    data = json.loads(result.model_dump_json())
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ResultError, match="newer than this trainbench understands"):
        parse_result(json.dumps(data), "x.json")


WRITER = r"""
import sys, time
from pathlib import Path
import suite.results.record as R
real_fdopen = R.os.fdopen
class Slow:
    def __init__(self, f): self.f = f
    def write(self, text):
        for i in range(0, len(text), 4096):
            self.f.write(text[i:i+4096]); self.f.flush(); time.sleep(0.01)
    def __getattr__(self, k): return getattr(self.f, k)
    def __enter__(self): return self
    def __exit__(self, *a): return self.f.__exit__(*a)
R.os.fdopen = lambda *a, **k: Slow(real_fdopen(*a, **k))
print("writing", flush=True)
R.write_atomic(Path(sys.argv[1]), "x" * 2_000_000)
print("done", flush=True)
"""


def test_kill_during_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "run.json"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    # kill once data is in the temporary file (an event, not a fixed sleep): the kill lands mid-write
    deadline = time.monotonic() + 120
    while not any(p.stat().st_size > 0 for p in tmp_path.glob(".tmp-*.part")) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL and "done" not in proc.stdout.read()
    assert [p.stat().st_size > 0 for p in tmp_path.glob(".tmp-*.part")] == [True]  # it died mid-write
    assert not target.exists()
    assert result_files(tmp_path) == []  # leftovers are hidden temp files, never results
    assert load_results(tmp_path).errors == []

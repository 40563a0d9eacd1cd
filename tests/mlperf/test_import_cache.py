"""The import's log cache (suite/mlperf/scan.py): a second import reads nothing it has read, yet a log changed in
place is read again, even when rewritten at the same size within the same mtime tick (the racy case git's index
guards against); a touched or copied log is hashed, not parsed and checked again."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from support import mlperf_fixture

from suite.mlperf import importer, scan

RULESET = "5.1.0"


@pytest.fixture
def amd(tmp_path) -> tuple[Path, Path]:
    """AMD's 20 published logs (mtimes from the archive: long past), and the log this test rewrites."""
    src = mlperf_fixture.unpack(tmp_path / "published")
    only = tmp_path / "training_results_v5.1"
    shutil.copytree(src / "AMD", only / "AMD")
    logs = sorted((only / "AMD" / "results").rglob("llama31_8b/result_*.txt"))
    return only, logs[0]


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = scan.read_log

    def counting(path: str, ruleset: str):
        seen.append(path)
        return real(path, ruleset)

    monkeypatch.setattr(scan, "read_log", counting)
    return seen


def test_a_log_rewritten_at_the_same_size_and_mtime_is_read_again(amd, tmp_path, reads):
    src, log = amd
    original = log.read_bytes()
    log.write_bytes(original + b"\nedit A\n")  # written now: its mtime is within the racy window of the import
    written_ns = log.stat().st_mtime_ns
    results = tmp_path / "results"
    first = importer.import_tree(src, results, RULESET, workers=1)
    assert len(first.imported) == 20 and not first.skipped and len(reads) == 20
    # the same size, the same mtime (the same timestamp tick): only the content tells
    log.write_bytes(original + b"\nedit B\n")
    os.utime(log, ns=(written_ns, written_ns))
    assert log.stat().st_mtime_ns == written_ns
    reads.clear()
    second = importer.import_tree(src, results, RULESET, workers=1)
    assert reads == [str(log)]  # read again; the 19 others from the cache
    assert len(second.imported) == 1 and second.already == 19, (second.imported, second.already)


def test_a_second_import_reads_nothing_and_a_touched_log_is_only_hashed(amd, tmp_path, reads):
    src, log = amd
    results = tmp_path / "results"
    assert len(importer.import_tree(src, results, RULESET, workers=1).imported) == 20
    assert len(reads) == 20
    reads.clear()
    again = importer.import_tree(src, results, RULESET, workers=1)
    assert reads == [] and again.already == 20 and not again.imported
    past_ns = time.time_ns() - 60 * 10**9  # touched a minute ago: outside the racy window, a new stat
    os.utime(log, ns=(past_ns, past_ns))
    touched = importer.import_tree(src, results, RULESET, workers=1)
    assert reads == [] and touched.already == 20 and not touched.imported  # the same hash: nothing to read
    assert scan.Cache(results / scan.CACHE_NAME, RULESET).stat[str(log)][1] == past_ns  # its new stat kept
    # a real change (another size): read again, named and skipped as the truncated log it now is
    log.write_bytes(log.read_bytes()[:4000])
    os.utime(log, ns=(past_ns, past_ns))
    changed = importer.import_tree(src, results, RULESET, workers=1)
    assert reads == [str(log)] and not changed.imported and changed.already == 19
    assert len(changed.skipped) == 1 and str(log) in changed.skipped[0]

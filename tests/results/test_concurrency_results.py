"""Many writers into one results folder at once, and writers killed mid-write: nothing collides, nothing is lost,
no partial file is ever left where a reader looks."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.faults import env, sh, wait_for

from benchmarks.sim.results import make_result
from suite.results.record import load_results, read_result, result_files, write_result

WRITERS, PER_WRITER = 8, 25

# Each writer rewrites the same result (same run id, same second): every write collides on the same path,
# so each one that loses the os.link race must take a fresh run id, never replace the file it raced.
WRITER = r"""
import sys, time
from pathlib import Path
from suite.results.record import parse_result, write_result
root, idx, n, go, template = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5]
text = Path(template).read_text()
(root.parent / f"ready.{idx}").touch()
while not go.exists():
    time.sleep(0.001)
for seq in range(n):
    r = parse_result(text, template)
    r.config = {"writer": idx, "seq": seq}
    write_result(root, r)
"""


def test_eight_writers_at_once_lose_nothing(tmp_path):
    root, go, template = tmp_path / "results", tmp_path / "go", tmp_path / "template.json"
    template.write_text(make_result().model_dump_json())
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(i), str(PER_WRITER), str(go), str(template)],
                              env=env()) for i in range(WRITERS)]
    wait_for(lambda: len(list(tmp_path.glob("ready.*"))) == WRITERS, 120, "all writers to start")
    go.touch()  # release them together
    assert [p.wait(timeout=120) for p in procs] == [0] * WRITERS
    loaded = load_results(root)
    assert loaded.errors == []
    assert len(loaded.results) == WRITERS * PER_WRITER  # nothing lost
    seen = {(r.config["writer"], r.config["seq"]) for _, r in loaded.results}
    assert seen == {(w, s) for w in range(WRITERS) for s in range(PER_WRITER)}  # nothing overwritten
    assert len({r.run_id for _, r in loaded.results}) == WRITERS * PER_WRITER
    assert not list(root.rglob(".tmp-*"))  # every temporary file was cleaned up


KILLED_WRITER = r"""
import os, sys, time
from pathlib import Path
import suite.results.record as results
root, marker, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
r = results.parse_result(Path(sys.argv[4]).read_text(), "template")
if mode == "in-fsync":  # the data is in the temporary file, not yet linked into place: the kill lands here
    real = os.fsync
    def fsync(fd):
        marker.touch()
        time.sleep(600)
        real(fd)
    os.fsync = fsync
    results.write_result(root, r)
else:  # big results, written back to back; the parent kills at a random moment
    marker.touch()
    while True:
        r.run_id = results.new_run_id()
        results.write_result(root, r)
"""


def _writer(root: Path, marker: Path, mode: str, template: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(root), str(marker), mode, str(template)],
                            env=env())


def test_sigkill_between_write_and_link_leaves_no_partial_result(tmp_path):
    root, marker, template = tmp_path / "results", tmp_path / "marker", tmp_path / "template.json"
    template.write_text(make_result().model_dump_json())
    earlier = write_result(root, make_result(run_id="earlier0"))
    before = earlier.read_bytes()
    p = _writer(root, marker, "in-fsync", template)
    wait_for(marker.exists, 120, "the writer to be mid-write")
    p.send_signal(signal.SIGKILL)
    assert p.wait(timeout=60) == -signal.SIGKILL
    leftovers = list(root.rglob(".tmp-*.part"))
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0  # the kill really landed mid-write
    assert result_files(root) == [earlier] and earlier.read_bytes() == before  # readers see only whole results
    v = sh("results", "validate", str(root))
    assert v.returncode == 0 and "1 valid, 0 invalid" in v.stdout


@pytest.mark.slow
def test_sigkill_at_random_moments_never_leaves_a_bad_result(tmp_path):
    """Kill a writer of big results at random moments until kills have landed mid-write (a temporary file is
    left behind: the data was being written or synced) as well as between writes: every file a reader sees is
    a whole, valid result, and the results written before each kill are all there."""
    root, template = tmp_path / "results", tmp_path / "template.json"
    big = make_result(eval_curve=[make_result().eval_curve[0]] * 5_000)  # about a MB: the write takes a while
    template.write_text(big.model_dump_json())
    rng = random.Random(9)
    kills = mid_write = 0
    while kills < 40 and (mid_write < 2 or kills < 4):
        marker = tmp_path / f"marker{kills}"
        before_results = len(result_files(root)) if root.exists() else 0
        before_parts = len(list(tmp_path.rglob(".tmp-*.part")))
        p = _writer(root, marker, "loop", template)
        wait_for(marker.exists, 120, "the writer to start")
        # the writer finishes one whole result first (so results exist), then it dies at a random moment
        wait_for(lambda n=before_results: root.exists() and len(result_files(root)) > n, 120, "a whole result")
        time.sleep(rng.uniform(0.0, 0.3))
        p.send_signal(signal.SIGKILL)
        assert p.wait(timeout=60) == -signal.SIGKILL
        kills += 1
        mid_write += len(list(tmp_path.rglob(".tmp-*.part"))) > before_parts
    loaded = load_results(root)
    assert mid_write >= 2, f"only {mid_write} of {kills} kills landed mid-write"  # the test was not vacuous
    assert loaded.errors == []  # every file a reader sees is a whole, valid result
    assert len(loaded.results) >= kills  # each writer finished at least one result before it was killed
    for path, r in loaded.results:
        assert len(r.eval_curve) == 5_000, path
        json.loads(path.read_text())
    print(f"{kills} kills, {mid_write} mid-write, {len(loaded.results)} whole results")


def test_existing_result_is_never_replaced(tmp_path):
    a = make_result(config={"n": 1})
    path_a = write_result(tmp_path, a)
    b = make_result(config={"n": 2})  # same run id and second: same file name
    path_b = write_result(tmp_path, b)
    assert path_a != path_b and b.run_id != "0123abcd"
    assert read_result(path_a).config == {"n": 1} and read_result(path_b).config == {"n": 2}

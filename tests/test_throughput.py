"""`run --mode throughput`: warm-up untimed, then every measured step timed; no evaluation; status measured;
and the lockstep turns that make two processes alternate step by step."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

from suite import harness
from suite.results import SCHEMA_VERSION, read_result
from suite.specload import load_spec
from suite.throughput import Turns


def test_throughput_mode_times_every_measured_step_and_never_evaluates(digits_path: Path, tmp_path: Path) -> None:
    spec = load_spec(digits_path, {"throughput.measure_steps": 25, "throughput.warmup_steps": 3}, "tiny")
    req = harness.RunRequest(spec=spec, results_dir=tmp_path, threads=1, mode="throughput")
    result, path = harness.run(req)
    assert result.status == "measured" and result.mode == "throughput" and result.error is None
    assert result.steps == 25 and len(result.step_times_s) == 25 and all(t > 0 for t in result.step_times_s)
    assert result.eval_curve == [] and result.time_to_target_s is None and result.final_metrics == {}
    assert abs(result.train_s - sum(result.step_times_s)) < 1e-3
    back = read_result(path)
    assert back.schema_version == SCHEMA_VERSION == 2 and back.step_times_s == result.step_times_s
    assert back.config["mode"] == "throughput" and back.config["spec"]["throughput"]["warmup_steps"] == 3
    # the throughput block is not in the spec hash: a TTA run of the same spec has the same hash
    assert spec.spec_hash() == load_spec(digits_path, variant="tiny").spec_hash()


def test_turns_make_two_sides_alternate() -> None:
    d = Path(tempfile.mkdtemp())
    a, b = d / "a", d / "b"
    os.mkfifo(a)
    os.mkfifo(b)
    holder = [os.open(a, os.O_RDWR), os.open(b, os.O_RDWR)]
    os.write(holder[0], b"t")  # side 1 goes first
    log: list[str] = []

    def side(name: str, inp: Path, out: Path) -> None:
        turns = Turns(f"{inp}:{out}")
        for _ in range(5):
            turns.wait()
            log.append(name)
            turns.done()
        turns.close()

    threads = [threading.Thread(target=side, args=("2", b, a)), threading.Thread(target=side, args=("1", a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for fd in holder:
        os.close(fd)
    assert log == ["1", "2"] * 5


def test_no_turns_outside_an_ab() -> None:
    t = Turns(None)
    t.wait()
    t.done()
    t.close()

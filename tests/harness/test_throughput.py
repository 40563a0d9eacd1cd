"""`run --mode throughput`: warm-up untimed, then every measured step timed; no evaluation; status measured;
and the lockstep turns that make two processes alternate step by step."""

from __future__ import annotations

import os
import resource
import tempfile
import threading
import time
from pathlib import Path

from suite import harness
from suite.results.record import SCHEMA_VERSION, read_result
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
    assert back.schema_version == SCHEMA_VERSION == 3 and back.step_times_s == result.step_times_s
    assert back.config["mode"] == "throughput" and back.config["spec"]["throughput"]["warmup_steps"] == 3
    # the throughput block is not in the spec hash: a TTA run of the same spec has the same hash
    assert spec.spec_hash() == load_spec(digits_path, variant="tiny").spec_hash()


def test_turns_make_two_sides_alternate() -> None:
    _alternate()


def test_turns_work_with_descriptors_above_1024() -> None:
    """A long-lived process (a Ray worker, a pytest worker) holds many files; select() refuses a descriptor >= 1024
    (FD_SETSIZE) and crashed the token wait there, so the turns must wait with poll()."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1200, hard), hard))
    filler: list[int] = []
    try:
        while not filler or filler[-1] < 1030:
            filler.append(os.open(os.devnull, os.O_RDONLY))
        _alternate()  # every FIFO descriptor Turns opens is now above 1024
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _alternate() -> None:
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


def test_the_cpu_clock_times_work_not_waits(digits_path: Path, tmp_path: Path, monkeypatch) -> None:
    """throughput.clock cpu: the step times are the process's CPU time, so a step that waits (here a 200 ms sleep in
    every step) is not slower on it, while train_s (wall) still holds the waits; the clock is in the comparison
    key, so a cpu-clock side is never compared with a wall-clock one."""
    from suite.backends.torch.backend import TorchBackend
    from suite.results import key as compare_key

    original = TorchBackend.train_step
    sleep_s, steps = 0.2, 6

    def sleepy(self, state, batch):
        time.sleep(sleep_s)
        return original(self, state, batch)

    monkeypatch.setattr(TorchBackend, "train_step", sleepy)
    spec = load_spec(digits_path, {"throughput.measure_steps": steps, "throughput.warmup_steps": 1,
                                   "throughput.clock": "cpu"}, "tiny")
    result, _ = harness.run(harness.RunRequest(spec=spec, results_dir=tmp_path, threads=1, mode="throughput",
                                               measure_peak=False))
    assert result.status == "measured" and len(result.step_times_s) == steps
    assert result.train_s >= steps * sleep_s  # the wall clock holds the sleeps ...
    # ... the CPU clock does not. Process CPU time also counts other threads (an OpenMP pool spinning after a
    # parallel region, a test runner's own threads), so it is not compared with wall minus sleep: a step's work
    # on digits tiny is a few ms, far below the 200 ms each step sleeps
    assert max(result.step_times_s) < sleep_s / 2, result.step_times_s
    key = compare_key.key_of(result.config, backend="torch", world_size=1, parallel=None, mode="throughput")
    wall = compare_key.key_of({**result.config, "spec": {**result.config["spec"], "throughput": {
        "warmup_steps": 1, "clock": "wall"}}}, backend="torch", world_size=1, parallel=None, mode="throughput")
    assert key["clock"] == "cpu" and "clock" not in wall  # the default adds nothing: older keys stay equal
    assert any("throughput clock" in d for d in compare_key.differences(wall, key))

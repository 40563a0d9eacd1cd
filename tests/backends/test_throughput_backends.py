"""Throughput mode (`--mode throughput`) under the DeepSpeed and Megatron backends, and under the NPU backend with
the device faked (no Ascend here): status `measured`, every measured step's time recorded, warm-up excluded.

Warm-up exclusion is checked by construction, not by a clock band: each backend's `train_step` is wrapped so
that it counts its calls, sleeps WARMUP_SLEEP_S in the warm-up calls only, and records how long each call
took. The run must have made warm-up + measure calls, recorded exactly `measure` step times, each of which
holds its own call (a timed window contains the step it times) and none of which holds a warm-up call's sleep:
all measured windows together exceed their calls by less than one warm-up sleep (a few Python statements and a
no-op synchronize per step against 0.5 s).
"""

from __future__ import annotations

import time
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from support.backend_util import CHAR_GPT, DIGITS
from support.promised import require

from suite import devices, harness, registry
from suite.results.record import read_result
from suite.specload import load_spec

torch.set_num_threads(1)
WARMUP, MEASURE = 3, 12
WARMUP_SLEEP_S = 0.5
SETS = {"throughput.warmup_steps": WARMUP, "throughput.measure_steps": MEASURE}


def _instrument(monkeypatch: pytest.MonkeyPatch, backend: str) -> list[float]:
    """Wrap the backend's train_step: durations of every call, in order; warm-up calls sleep first."""
    cls = registry.backend_class(backend)
    original = cls.train_step
    durations: list[float] = []

    def train_step(self: Any, state: Any, batch: Any) -> Any:
        t = time.perf_counter()
        if len(durations) < WARMUP:
            time.sleep(WARMUP_SLEEP_S)
        out = original(self, state, batch)
        durations.append(time.perf_counter() - t)
        return out

    monkeypatch.setattr(cls, "train_step", train_step)
    return durations


def _run_and_check(spec_path: Path, backend: str, tmp_path: Path, durations: list[float]) -> Any:
    spec = load_spec(spec_path, SETS, "tiny" if spec_path == DIGITS else None)
    req = harness.RunRequest(spec=spec, backend=backend, results_dir=tmp_path, threads=1, mode="throughput",
                             measure_peak=False)
    result, path = harness.run(req)
    assert result.status == "measured" and result.mode == "throughput" and result.error is None, result.error
    assert result.backend == backend
    assert len(durations) == WARMUP + MEASURE  # the warm-up steps ran ...
    assert result.steps == MEASURE and len(result.step_times_s) == MEASURE  # ... and only the measured are counted
    assert result.samples == MEASURE * spec.data.batch_size
    measured_calls = durations[WARMUP:]
    slack = 1e-6  # the stored times are rounded to 0.1 us (throughput.compact)
    assert all(t + slack >= call for t, call in zip(result.step_times_s, measured_calls, strict=True))
    assert sum(result.step_times_s) - sum(measured_calls) < WARMUP_SLEEP_S  # no warm-up sleep in any window
    assert result.eval_curve == [] and result.time_to_target_s is None
    back = read_result(path)
    assert back.step_times_s == result.step_times_s and back.config["mode"] == "throughput"
    return result


@pytest.mark.slow
def test_throughput_mode_under_deepspeed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    require("deepspeed")
    durations = _instrument(monkeypatch, "deepspeed")
    result = _run_and_check(DIGITS, "deepspeed", tmp_path, durations)
    assert result.parallel["zero_stage"] == 0


@pytest.mark.slow
def test_throughput_mode_under_megatron(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    require("megatron.core")
    durations = _instrument(monkeypatch, "megatron")
    result = _run_and_check(CHAR_GPT, "megatron", tmp_path, durations)
    assert result.parallel["tp"] == 1 and result.parallel["pp"] == 1


class _FakeEvent:
    """torch.npu.Event's surface: the time of record(), elapsed_time in milliseconds."""

    made = 0

    def __init__(self, enable_timing: bool = False) -> None:
        _FakeEvent.made += 1
        self.at: float | None = None

    def record(self) -> None:
        self.at = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _FakeEvent) -> float:
        assert self.at is not None and end.at is not None
        return (end.at - self.at) * 1e3


class _FakeNpuDevice(devices.Device):
    """An `npu` device whose tensors live on the CPU (nothing else can run them here)."""

    @property
    def torch(self) -> torch.device:
        return torch.device("cpu")


def _fake_npu(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    calls = types.SimpleNamespace(synchronize=0)

    def synchronize(*_: Any) -> None:
        calls.synchronize += 1

    fake = types.SimpleNamespace(
        Event=_FakeEvent, synchronize=synchronize, set_device=lambda i: None, is_available=lambda: True,
        device_count=lambda: 1, get_device_name=lambda i=0: "Ascend910B3 (faked)",
        reset_peak_memory_stats=lambda i=0: None, max_memory_allocated=lambda i=0: 0,
        max_memory_reserved=lambda i=0: 0)
    monkeypatch.setattr(torch, "npu", fake, raising=False)
    monkeypatch.setattr(devices, "npu_unavailable_reason", lambda: "")
    monkeypatch.setattr(devices, "current", lambda local_rank=0: _FakeNpuDevice("npu", local_rank))
    monkeypatch.setenv("TRAINBENCH_HARDWARE", "fake-npu")  # no fingerprint lookups of a device that is not there
    return calls


def test_throughput_mode_under_npu_with_the_device_faked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The NPU backend's run in throughput mode: the step times come from device events (one pair per measured
    step, none for warm-up) and every timer read is preceded by a device synchronize."""
    calls = _fake_npu(monkeypatch)
    durations = _instrument(monkeypatch, "npu")
    _FakeEvent.made = 0
    result = _run_and_check(DIGITS, "npu", tmp_path, durations)
    assert result.hardware.device_type == "npu" and result.parallel["device"] == "npu"
    assert _FakeEvent.made == 2 * MEASURE  # a begin/end pair per measured step, none in the warm-up
    # a synchronize before and after every measured step (plus warm-up and the loop's edges)
    assert calls.synchronize >= 2 * MEASURE + WARMUP


def test_the_cpu_clock_is_refused_on_an_accelerator(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_npu(monkeypatch)
    spec = load_spec(DIGITS, {**SETS, "throughput.clock": "cpu"}, "tiny")
    result, _ = harness.run(harness.RunRequest(spec=spec, backend="npu", results_dir=None, threads=1,
                                               mode="throughput", measure_peak=False))
    assert result.status == "error" and "throughput.clock cpu: only on a cpu device" in (result.error or "")
    assert result.step_times_s == []

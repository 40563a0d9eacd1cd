"""Faults injected through real code: a model component (`model.arch: support.faults:FAULTY`) that wraps the
real digits CNN and misbehaves at training step k, plus the helpers the fault tests share.

The fault is declared in the spec itself (validated by this component's pydantic Config), so it reaches
every rank of a torchrun job and every child process without environment variables.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

import torch
import yaml
from pydantic import Field
from torch import nn

from suite.models.vision import cnn

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "workloads" / "cv" / "digits_cnn.yaml"

Fault = Literal[
    "none",  # behaves (with sleep_s, a slow run that a signal can reach mid-way)
    "raise",  # RuntimeError from model code
    "nan",  # non-finite output, so a non-finite loss
    "nan_eval",  # fine in training, NaN logits at evaluation: NaN metrics in the result
    "oom",  # torch.OutOfMemoryError, as CUDA raises it
    "cpu_oom",  # a real allocation the CPU allocator refuses (1 PiB)
    "hang",  # time.sleep in C: the GIL is released, only the watchdog can end it
    "hang_gil",  # libc sleep called with the GIL held: not even the watchdog thread runs
    "exit",  # sys.exit(3) inside model code (SystemExit is not an Exception)
    "sigkill",  # the process is SIGKILLed (what the kernel's OOM killer does)
    "segv",  # a crash in native code: a read of address 0 (SIGSEGV)
]


class Config(cnn.Config):
    fault: Fault = "none"
    at_step: int = Field(default=3, ge=1, description="training forward call that faults (1 = first)")
    rank: int | None = Field(default=None, description="only this rank faults (None: every rank)")
    sleep_s: float = Field(default=0.0, ge=0, description="sleep in every training step")
    ready_file: str | None = Field(default=None, description="written (with the pid) when step at_step starts; "
                                   "`{rank}` in it is replaced by the rank")


class FaultyModel(nn.Module):
    def __init__(self, inner: nn.Module, cfg: Config):
        super().__init__()
        self.inner = inner
        self.cfg = cfg
        self.calls = 0

    def _armed(self) -> bool:
        rank = int(os.environ.get("RANK", "0"))
        return self.calls >= self.cfg.at_step and (self.cfg.rank is None or self.cfg.rank == rank)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        if not self.training:
            out = self.inner(x)
            return out * math.nan if cfg.fault == "nan_eval" else out
        self.calls += 1
        if cfg.sleep_s:
            time.sleep(cfg.sleep_s)
        if cfg.ready_file and self.calls == cfg.at_step:
            Path(cfg.ready_file.replace("{rank}", os.environ.get("RANK", "0"))).write_text(str(os.getpid()))
        if self._armed():
            if cfg.fault == "raise":
                raise RuntimeError(f"injected fault in model code at step {self.calls}")
            if cfg.fault == "oom":
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB (injected)")
            if cfg.fault == "cpu_oom":
                torch.empty(2**50, dtype=torch.uint8)  # 1 PiB: more than any address space holds
            if cfg.fault == "hang":
                time.sleep(3600)
            if cfg.fault == "hang_gil":
                ctypes.PyDLL(None).sleep(3600)  # PyDLL keeps the GIL for the call
            if cfg.fault == "exit":
                sys.exit(3)
            if cfg.fault == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if cfg.fault == "segv":
                ctypes.string_at(0)
        out = self.inner(x)
        return out * math.nan if cfg.fault == "nan" and self._armed() else out


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    base = cnn.Config.model_validate(cfg.model_dump(include=set(cnn.Config.model_fields)))
    return FaultyModel(cnn.build(base, meta), cfg)


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    base = cnn.Config.model_validate(cfg.model_dump(include=set(cnn.Config.model_fields)))
    return cnn.flops_per_sample(base, meta)


class _Component:
    Config = Config
    build = staticmethod(build)
    flops_per_sample = staticmethod(flops_per_sample)


FAULTY = _Component()


# ---- helpers for the tests ------------------------------------------------------------------------------


def env(**extra: str) -> dict[str, str]:
    """A child's environment: this checkout and tests/ importable, one thread per process."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), e.get("PYTHONPATH", "")])
    e.setdefault("OMP_NUM_THREADS", "1")
    e["COLUMNS"] = "200"  # rich wraps tables to the terminal; a wide one keeps cells whole for the asserts
    e.update(extra)
    return e


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "suite.cli", *args]


def sh(*args: str, timeout: float = 300, **popen: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli(*args), capture_output=True, text=True, env=env(), timeout=timeout, cwd=ROOT, **popen)


def digits_data() -> dict[str, Any]:
    return yaml.safe_load(DIGITS.read_text())


def write_spec(folder: Path, name: str, fault: str = "none", steps: int = 40, **model: Any) -> Path:
    """A digits spec whose model is the faulty CNN, small and short; budget/eval/etc. via dotted `model` keys."""
    data = digits_data()
    budget = {k[len("budget."):]: model.pop(k) for k in list(model) if k.startswith("budget.")}
    target = {k[len("target."):]: model.pop(k) for k in list(model) if k.startswith("target.")}
    data["model"] = {"arch": "support.faults:FAULTY", "channels": [4], "hidden": 16, "fault": fault, **model}
    data["budget"] = {"max_train_s": 60, "max_steps": steps, **budget}
    data["target"].update(target)
    data["variants"] = {}
    data["name"] = "cv/test_digits_copy"  # a copy has a name of its own, never a built-in workload's
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def wait_for(predicate: Any, timeout_s: float = 120, what: str = "condition") -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def json_rows(stdout: str) -> list[dict[str, Any]]:
    import json

    return json.loads(stdout[stdout.index("["):])


def make_result(**fields: Any) -> Any:
    """A complete, valid Result, as the harness writes one (fields override)."""
    from datetime import UTC, datetime

    from suite.results.record import EvalPoint, HardwareInfo, Result

    base: dict[str, Any] = dict(
        run_id="0123abcd", started_at=datetime(2026, 12, 3, 7, 0, 0, tzinfo=UTC), workload="cv/digits_cnn",
        workload_version=1, spec_hash="f" * 16, backend="torch", config={"spec": {"name": "cv/digits_cnn"}},
        status="reached", time_to_target_s=4.2, train_s=4.0, eval_s=0.2, init_s=1.0, total_s=4.2, steps=120,
        samples=7680, steps_to_target=120,
        eval_curve=[EvalPoint(step=20 * i, samples=1280 * i, elapsed_s=0.7 * i, train_s=0.68 * i,
                              metrics={"accuracy": 0.1 * i}) for i in range(1, 7)],
        hardware=HardwareInfo(slug="cpu-test-2c", device_type="cpu", device_name="test cpu", device_count=1,
                              cpu_model="test cpu", cpu_cores=2),
        seed=0,
    )
    base.update(fields)
    return Result(**base)

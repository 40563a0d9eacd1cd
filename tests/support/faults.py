"""Every fault the tests inject through real code, in one module: a model component (`model.arch:
support.faults:FAULTY`) that wraps the real digits CNN and misbehaves at training step k; workload tasks that fail
on purpose (`task: support.faults:NaNAt`, ...), inside the harness's handling or outside it (the executors');
plus the helpers the fault tests share.

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

from suite.data.base import DataMissing
from suite.models.vision import cnn
from suite.workloads.image_classification import ImageClassification

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
    sleep_rank: int | None = Field(default=None, description="only this rank sleeps sleep_s (None: every rank)")
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
        if cfg.sleep_s and cfg.sleep_rank in (None, int(os.environ.get("RANK", "0"))):
            time.sleep(cfg.sleep_s)  # inside the forward: under FSDP2, after its all-gather, before its reduce-scatter
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


# ---- tasks that fail on purpose (task: support.faults:NaNAt, ...) --------------------------------------------

def _at() -> int:
    return int(os.environ.get("FAULT_AT_STEP", "5"))


class NaNAt(ImageClassification):
    """Digits, but the loss turns NaN at step FAULT_AT_STEP."""

    calls = 0

    def loss(self, model, batch):
        self.calls += 1
        loss = super().loss(model, batch)
        return loss * float("nan") if self.calls >= _at() else loss


class RaiseAt(ImageClassification):
    """Digits, but model code raises at step FAULT_AT_STEP."""

    calls = 0

    def loss(self, model, batch):
        self.calls += 1
        if self.calls >= _at():
            raise RuntimeError("injected fault in model code")
        return super().loss(model, batch)


class OOMAt(ImageClassification):
    calls = 0

    def loss(self, model, batch):
        self.calls += 1
        if self.calls >= _at():
            raise torch.OutOfMemoryError("injected: CUDA out of memory. Tried to allocate 80.00 GiB")
        return super().loss(model, batch)


class Slow(ImageClassification):
    """Digits with a sleep in every step, so a signal can arrive mid-run; touches FAULT_READY when running."""

    calls = 0

    def loss(self, model, batch):
        self.calls += 1
        if self.calls == 3 and os.environ.get("FAULT_READY"):
            open(os.environ["FAULT_READY"], "w").close()
        time.sleep(float(os.environ.get("FAULT_SLEEP_S", "0.05")))
        return super().loss(model, batch)


class BrokenData(ImageClassification):
    """A workload whose data set fails to load (in init, before any tensor work)."""

    def __init__(self, spec, ctx):
        raise RuntimeError("injected fault while reading the data set")


class BrokenOptimizer(torch.optim.SGD):
    """An optimizer that resolves and validates, then fails while the backend builds it (during init)."""

    def __init__(self, params, lr: float = 0.1, weight_decay: float = 0.0):
        raise RuntimeError("injected fault while building the optimizer")


class SlowFirstBatch(ImageClassification):
    """Digits whose first training batch takes FAULT_SLEEP_S longer to fetch (a cold data pipeline): MLPerf's
    clock starts before the first batch is touched, so that time is on the clock."""

    def train_batches(self, rank: int, world: int):
        for i, batch in enumerate(super().train_batches(rank, world)):
            if i == 0:
                time.sleep(float(os.environ.get("FAULT_SLEEP_S", "1.5")))
            yield batch


class SlowFirstStep(ImageClassification):
    """Digits whose first training step takes FAULT_SLEEP_S longer (a compile or lazy init): steady-state
    throughput, and the MFU behind it, leave that step out."""

    calls = 0

    def loss(self, model, batch):
        self.calls += 1
        if self.calls == 1:
            time.sleep(float(os.environ.get("FAULT_SLEEP_S", "1.5")))
        return super().loss(model, batch)


PROBE: dict = {}  # what the last Probe was handed (tests run one harness run at a time in a process)


class Probe(ImageClassification):
    """Digits that keeps what the harness hands it: its context, the model attached after the backend's setup,
    and the model each evaluation gets. Constructing it takes FAULT_SLEEP_S longer (a data set read and staged
    during init), each evaluation FAULT_EVAL_SLEEP_S longer, and it describes its data pipeline (as ImageNet's
    reader does)."""

    def __init__(self, spec, ctx):
        time.sleep(float(os.environ.get("FAULT_SLEEP_S", "0")))
        super().__init__(spec, ctx)
        PROBE.clear()
        PROBE.update(ctx=ctx, attached=None, evaluated=[])

    def attach(self, model):
        PROBE["attached"] = model
        super().attach(model)

    def evaluate(self, model):
        PROBE["evaluated"].append(model)
        time.sleep(float(os.environ.get("FAULT_EVAL_SLEEP_S", "0")))
        return super().evaluate(model)

    def data_pipeline(self):
        return {"reader": "probe"}


# ---- tasks that fail outside the harness's own error handling (the executor fault tests) ------------------

class MissingDataTask(ImageClassification):
    """Raises DataMissing on the worker (the harness re-raises it): data not installed on that node."""

    def __init__(self, spec, ctx):
        raise DataMissing("fault injection: data set not installed on this worker")


class CrashingTask(ImageClassification):
    """Kills its own process without a word, as an OOM kill or a segfault would."""

    def __init__(self, spec, ctx):
        os._exit(3)

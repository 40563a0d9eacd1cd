"""The Workload contract: model, data, loss, evaluation and analytic FLOPs behind one spec.

What a backend and the harness may rely on of a task (`Workload`), what a batch is (`Batch`), and what a component
may know of the run it is built for (`Context`). Imports no suite module but the spec: backends import it for their
annotations, so the contract sits below the registry (suite/workloads/base.py, which resolves components through the
registry, builds on it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from suite.spec import WorkloadSpec

Batch = Any  # a tensor, a tuple/list/dict of tensors; backends move it to the device


@runtime_checkable
class Workload(Protocol):
    spec: WorkloadSpec

    def build_model(self) -> nn.Module: ...  # single-device; backends own all wrapping

    def train_batches(self, rank: int, world: int) -> Iterator[Batch]: ...  # endless; the harness stops it

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor: ...

    def evaluate(self, model: nn.Module) -> dict[str, float]: ...

    def flops_per_sample(self) -> float: ...  # analytic, forward + backward


@dataclass
class Context:
    """What a component may know about the run it is built for. Nothing here is read from globals."""

    data_root: Path
    seed: int
    device: torch.device


def side_files(workload: Any, model: nn.Module, warnings: list[str]) -> dict[str, bytes]:
    """The files a workload writes beside its result from the trained model (`side_files(model)`, e.g. a diffusion
    task's `.samples.png`), called by the harness after the clock stopped; a failure is a warning, never the run's end."""
    make = getattr(workload, "side_files", None)
    if make is None:
        return {}
    try:
        return dict(make(model))
    except Exception as e:  # noqa: BLE001
        warnings.append(f"side_files failed: {type(e).__name__}: {e}")
        return {}

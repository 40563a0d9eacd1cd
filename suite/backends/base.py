"""The Backend contract: availability, setup (untimed), one training step, the model to evaluate, barriers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import torch
from torch import nn

from suite.workloads.base import Batch, Workload


@dataclass
class Availability:
    ok: bool
    reason: str = ""  # why not, in words a user can act on
    version: str | None = None


@dataclass
class TrainState:
    model: nn.Module  # what train_step calls (possibly wrapped: DDP, DeepSpeed engine, ...)
    raw_model: nn.Module  # the single-device module the workload built
    optimizer: Any = None
    scheduler: Any = None
    scaler: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepOut:
    loss: torch.Tensor  # detached scalar; the harness decides when to read it (a read is a device sync)


@dataclass
class RunOptions:
    """Backend-independent choices of one run (from the CLI and the spec's backend block)."""

    precision: str = "fp32"  # fp32 | bf16 | fp16
    compile: bool = False
    options: dict[str, Any] = field(default_factory=dict)  # the spec's backends.<name> block, validated by it


class Backend(Protocol):
    name: ClassVar[str]

    def available(self) -> Availability: ...

    def setup(self, workload: Workload, opts: RunOptions) -> TrainState: ...

    def train_step(self, state: TrainState, batch: Batch) -> StepOut: ...

    def eval_model(self, state: TrainState) -> nn.Module: ...

    def synchronize(self) -> None: ...

    def parallel_layout(self) -> dict[str, Any]: ...

    def close(self) -> None: ...

"""The Backend contract, declared whole: every hook the harness, registry and CLI call is a member of `Backend`.

Required (abstract): available, setup, train_step, eval_model, synchronize, parallel_layout, close.
With defaults: Options (no options block), supports (every spec), data_shard (the process group's rank and
world), target_may_count (always), algorithm_report (nothing to report), own_trainer (none: the harness's
step loop). Callers call members directly, never look them up by getattr; tests/backends/test_backend_contract.py
checks both. docs/writing-a-backend.md lists them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from pydantic import BaseModel
from torch import nn

from suite.backends.availability import Availability

if TYPE_CHECKING:  # annotations only: the workload module imports the registry, which imports this lazily
    from suite.devices import Device
    from suite.workloads.contract import Batch, Workload


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


class Backend(ABC):
    """Subclass this; the registry refuses a backend class that does not. Constructed as `cls(device)`."""

    name: ClassVar[str]
    # the pydantic model of the spec's `backends.<name>` block (extra="forbid"); None: the block must be empty
    Options: ClassVar[type[BaseModel] | None] = None

    def __init__(self, device: Device) -> None:
        """Constructed by the harness with the device this rank runs on; the process group already exists."""
        self.device = device

    @staticmethod
    def supports(spec: Any) -> str | None:
        """None when this backend can run the spec, else why not (naming the field to change). Reads the spec
        only and imports no framework: it feeds `trainbench list --matrix` and refuses a pair before a run."""
        return None

    @abstractmethod
    def available(self) -> Availability:
        """Installed? Hardware present? Never raises; the reason says what to install or set."""

    @abstractmethod
    def setup(self, workload: Workload, opts: RunOptions) -> TrainState:
        """Untimed init: build, wrap and place the model, build the optimizer; owns all parallelism."""

    @abstractmethod
    def train_step(self, state: TrainState, batch: Batch) -> StepOut:
        """Forward + backward + optimizer step; the loss comes back detached (reading it is a device sync)."""

    @abstractmethod
    def eval_model(self, state: TrainState) -> nn.Module:
        """The module `workload.evaluate` gets: the same weights as training, no DDP wrapper."""

    @abstractmethod
    def synchronize(self) -> None:
        """Device barrier before a timer read that matters."""

    @abstractmethod
    def parallel_layout(self) -> dict[str, Any]:
        """{"dp", "tp", "pp", ...}: recorded in every result and used for MFU/HFU."""

    @abstractmethod
    def close(self) -> None:
        """Release what setup took; called on every ending, errors included."""

    def data_shard(self) -> tuple[int, int] | None:
        """(rank, world) of the data shard this rank reads; None: the process group's own rank and world.
        Model-parallel backends override it so that tensor-parallel peers read the same batch."""
        return None

    def target_may_count(self) -> bool:
        """False while an algorithm is still converging (pruning short of its sparsity): the target cannot count."""
        return True

    def algorithm_report(self) -> dict[str, Any]:
        """What the algorithms did (e.g. the sparsity reached), recorded as config.algorithm_report when non-empty."""
        return {}

    def recompute_fraction(self) -> float | None:
        """For HFU: the share of the forward this backend re-runs (activation checkpointing), in [0, 1]; None:
        read `parallel_layout()["activation_checkpointing"]` instead."""
        return None

    def comm_dtype(self) -> str | None:
        """The dtype gradients are reduced in, in MLPerf's names (`fp32`, `bfloat16`); None: the weights' dtype."""
        return None

    def own_trainer(self, state: TrainState) -> Any:
        """A backend that runs a whole trainer of its own (veRL's main_ppo) returns an object whose `drive(run)` the
        harness hands the clock to after the untimed init, instead of its step loop (suite/backends/verl/launch.py
        is one); None, the default: the harness's loop calls train_step."""
        return None

    checkpoint_format: ClassVar[str | None] = None  # the format `checkpoint_state` saves in; None: cannot checkpoint

    def checkpoint_state(self, state: TrainState) -> dict[str, Any]:
        """The model's and optimizer's state for torch.distributed.checkpoint (suite/backends/resume.py), as
        `get_state_dict` gives it: the same keys for a plain module, DDP and FSDP2 (sharded tensors stay sharded).
        The scheduler, scaler and RNG go beside it, per rank (`step_state`)."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

        if state.optimizer is None:
            return {"model": get_model_state_dict(state.model)}
        model_sd, optim_sd = get_state_dict(state.model, state.optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def load_checkpoint_state(self, state: TrainState, app_state: dict[str, Any]) -> None:
        """Put what `checkpoint_state` gave (now filled from a checkpoint) back into the model and optimizer."""
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

        if state.optimizer is None:
            set_model_state_dict(state.model, app_state["model"])
        else:
            set_state_dict(state.model, state.optimizer, model_state_dict=app_state["model"],
                           optim_state_dict=app_state["optim"])

    def save_checkpoint(self, state: TrainState, folder: Path) -> None:
        """A backend whose `checkpoint_format` is its engine's own (not torch.distributed.checkpoint) saves the model
        and optimizer into `folder` here: every rank calls it, and it returns once every rank's part is written."""
        raise NotImplementedError(f"{self.name}: checkpoint_format {self.checkpoint_format!r} needs save_checkpoint")

    def load_checkpoint(self, state: TrainState, folder: Path) -> None:
        """Load what `save_checkpoint` wrote into the model and optimizer (every rank calls it)."""
        raise NotImplementedError(f"{self.name}: checkpoint_format {self.checkpoint_format!r} needs load_checkpoint")

    def step_state(self, state: TrainState) -> dict[str, Any]:
        """This rank's small state beside the checkpoint: scheduler, scaler, the backend's own step count."""
        return {"scheduler": state.scheduler.state_dict() if state.scheduler is not None else None,
                "scaler": state.scaler.state_dict() if state.scaler is not None else None,
                "steps_done": getattr(self, "steps_done", None)}

    def load_step_state(self, state: TrainState, saved: dict[str, Any]) -> None:
        if state.scheduler is not None and saved.get("scheduler") is not None:
            state.scheduler.load_state_dict(saved["scheduler"])
        if state.scaler is not None and saved.get("scaler") is not None:
            state.scaler.load_state_dict(saved["scaler"])
        if saved.get("steps_done") is not None and hasattr(self, "steps_done"):
            self.steps_done = saved["steps_done"]


CONTRACT: tuple[str, ...] = (
    "name", "Options", "supports", "available", "setup", "train_step", "eval_model", "synchronize",
    "parallel_layout", "close", "data_shard", "target_may_count", "algorithm_report", "recompute_fraction",
    "comm_dtype", "own_trainer", "checkpoint_format", "checkpoint_state", "load_checkpoint_state", "step_state",
    "load_step_state", "save_checkpoint", "load_checkpoint",
)

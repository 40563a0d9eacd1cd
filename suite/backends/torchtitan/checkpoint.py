"""The torchtitan backend's checkpoints (`--checkpoint-every`): torchtitan's own CheckpointManager (DCP underneath,
its ModelWrapper's flattened model state, its `step-N` folders and `.metadata` check on load), handed the suite's
optimizer and lr scheduler as the Stateful objects it expects in place of its OptimizersContainer and
LRSchedulersContainer (the backend trains with the spec's optimizer, suite/backends/torchtitan/backend.py). No data loader:
the harness replays the data to the checkpoint's step and restores the RNG (suite/execution/recovery.py).

Synchronous (async_mode "disabled"): the harness's Checkpointer counts a checkpoint once this returns on every rank
(DCP's save ends in a collective). Imports torchtitan: only the backend calls this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

FOLDER = "torchtitan"  # inside the harness's step folder: <step folder>/torchtitan/step-<N>
_FLAT = StateDictOptions(flatten_optimizer_state_dict=True)  # as torchtitan's OptimizersContainer saves it


class _Optimizer(Stateful):
    """The spec's optimizer as torchtitan's OptimizersContainer presents one: FQN-keyed, flattened, FSDP2-aware."""

    def __init__(self, model: nn.Module, optimizer: Any):
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict[str, Any]:
        return get_optimizer_state_dict(self.model, self.optimizer, options=_FLAT)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_optimizer_state_dict(self.model, self.optimizer, optim_state_dict=state_dict, options=_FLAT)


class _Scheduler(Stateful):
    """The spec's lr scheduler as torchtitan's LRSchedulersContainer presents one."""

    def __init__(self, scheduler: Any):
        self.scheduler = scheduler

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict() if self.scheduler is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state_dict)


def manager(folder: Path, model: nn.Module, optimizer: Any, scheduler: Any) -> Any:
    """torchtitan's CheckpointManager over the step folder: every call of `save` writes, nothing is purged (the
    harness owns the folders), a load resumes the full training state (never model-only)."""
    from torchtitan.components.checkpoint import DATALOADER, CheckpointManager

    config = CheckpointManager.Config(enable=True, folder=FOLDER, interval=1, keep_latest_k=0,
                                      async_mode="disabled", last_save_model_only=False,
                                      initial_load_model_only=False)
    mgr = CheckpointManager(config, dataloader=None, model_parts=[model], optimizers=_Optimizer(model, optimizer),
                            lr_schedulers=_Scheduler(scheduler), states={}, sd_adapter=None, base_folder=str(folder))
    mgr.states.pop(DATALOADER, None)  # the harness replays the data; torchtitan's loader is not used
    return mgr


def save(folder: Path, model: nn.Module, optimizer: Any, scheduler: Any) -> None:
    from suite.backends.resume import step_of

    step = step_of(folder)
    mgr = manager(folder, model, optimizer, scheduler)
    try:
        if not mgr.save(step):
            raise RuntimeError(f"{folder}: torchtitan's CheckpointManager did not save step {step}")
    finally:
        mgr.close()


def load(folder: Path, model: nn.Module, optimizer: Any, scheduler: Any) -> None:
    from suite.backends.resume import step_of

    step = step_of(folder)
    mgr = manager(folder, model, optimizer, scheduler)
    try:
        if not mgr.load(step):
            raise RuntimeError(f"{folder}: torchtitan's CheckpointManager found no checkpoint of step {step}")
    finally:
        mgr.close()

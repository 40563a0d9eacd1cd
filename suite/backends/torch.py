"""Plain PyTorch: eager or torch.compile, the precision recipes of suite/algorithms/precision.py, compression hooks, DDP."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict
from torch import nn

from suite import devices
from suite.algorithms import compression, precision
from suite.algorithms.optimizers import build_optimizer
from suite.algorithms.schedules import build_scheduler
from suite.backends.base import Availability, Backend, RunOptions, StepOut, TrainState
from suite.workloads.base import Batch, Workload


class Options(BaseModel):
    """The spec's `backends.torch` block."""

    model_config = ConfigDict(extra="forbid")
    find_unused_parameters: bool = False
    grad_clip: float | None = None


def to_device(batch: Batch, device: torch.device) -> Batch:
    if isinstance(batch, torch.Tensor):
        return batch if batch.device == device else batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


class TorchBackend(Backend):
    name: ClassVar[str] = "torch"
    Options = Options

    def __init__(self, device: devices.Device):
        self.device = device
        self.world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        self._autocast: Any = nullcontext
        self.opts = Options()
        self.compression: Any = None
        self.precision = precision.Precision("fp32", device.type)

    def available(self) -> Availability:
        return Availability(True, version=torch.__version__)

    def setup(self, workload: Workload, opts: RunOptions) -> TrainState:
        self.opts = Options.model_validate(opts.options)
        if opts.precision not in precision.RECIPES:
            raise ValueError(f"--precision {opts.precision!r}: expected one of {', '.join(precision.RECIPES)}")
        reason = precision.unsupported_reason(opts.precision, self.device.type)
        if reason:
            raise precision.PrecisionUnsupported(reason)
        spec = workload.spec
        raw = workload.build_model().to(self.device.torch)
        # compression and the precision recipe change the single-device model, before compile and DDP wrap it
        self.compression = compression.build(spec.compression, raw, spec.budget.max_steps)
        self.precision = precision.Precision(opts.precision, self.device.type)
        train_params = self.precision.prepare(raw)
        model: nn.Module = raw
        if opts.compile:
            model = torch.compile(model)  # type: ignore[assignment]
        if self.world > 1:
            ids = [self.device.index] if self.device.type in ("cuda", "npu") else None
            model = nn.parallel.DistributedDataParallel(
                model, device_ids=ids, find_unused_parameters=self.opts.find_unused_parameters
            )
        optimizer = build_optimizer(spec.optimizer, train_params)
        scheduler = build_scheduler(spec.schedule, optimizer, spec.budget.max_steps)
        self._autocast = self.precision.autocast
        scaler = self.precision.scaler()
        self.workload = workload
        self.steps_done = 0
        return TrainState(model=model, raw_model=raw, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                          extra={"train_params": train_params})

    def train_step(self, state: TrainState, batch: Batch) -> StepOut:
        batch = to_device(batch, self.device.torch)
        opt = state.optimizer
        opt.zero_grad(set_to_none=True)
        with self._autocast():
            loss = self.workload.loss(state.model, batch)
        params = state.extra["train_params"]
        if state.scaler is not None:
            state.scaler.scale(loss).backward()
            if self.opts.grad_clip:
                state.scaler.unscale_(opt)
                nn.utils.clip_grad_norm_(params, self.opts.grad_clip)
            state.scaler.step(opt)
            state.scaler.update()
        else:
            loss.backward()
            self.precision.grads_to_master()
            if self.opts.grad_clip:
                nn.utils.clip_grad_norm_(params, self.opts.grad_clip)
            opt.step()
        self.precision.master_to_model()
        self.steps_done += 1
        if self.compression is not None:
            self.compression.after_step(self.steps_done, self.precision.aliases)
        state.scheduler.step()
        return StepOut(loss.detach())

    def target_may_count(self) -> bool:
        """False while a compression method is still converging (e.g. pruning before its final sparsity)."""
        return self.compression is None or bool(self.compression.target_may_count())

    def algorithm_report(self) -> dict[str, Any]:
        return {"compression": self.compression.report()} if self.compression is not None else {}

    def eval_model(self, state: TrainState) -> nn.Module:
        # evaluate the compiled module where there is one (same weights); never the DDP wrapper
        model = state.model.module if isinstance(state.model, nn.parallel.DistributedDataParallel) else state.model
        return model

    def synchronize(self) -> None:
        self.device.synchronize()

    def parallel_layout(self) -> dict[str, Any]:
        return {"dp": self.world, "tp": 1, "pp": 1}

    def close(self) -> None:
        pass

"""Plain PyTorch: eager or torch.compile, fp32 / bf16 autocast / fp16 autocast + GradScaler, DDP across ranks."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict
from torch import nn

from suite import devices
from suite.algorithms.optimizers import build_optimizer
from suite.algorithms.schedules import build_scheduler
from suite.backends.base import Availability, RunOptions, StepOut, TrainState
from suite.workloads.base import Batch, Workload

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


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


class TorchBackend:
    name: ClassVar[str] = "torch"
    Options = Options

    def __init__(self, device: devices.Device):
        self.device = device
        self.world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        self._autocast: Any = nullcontext
        self.opts = Options()

    def available(self) -> Availability:
        return Availability(True, version=torch.__version__)

    def setup(self, workload: Workload, opts: RunOptions) -> TrainState:
        self.opts = Options.model_validate(opts.options)
        if opts.precision not in DTYPES:
            raise ValueError(f"--precision {opts.precision!r}: expected one of {', '.join(DTYPES)}")
        raw = workload.build_model().to(self.device.torch)
        model: nn.Module = raw
        if opts.compile:
            model = torch.compile(model)  # type: ignore[assignment]
        if self.world > 1:
            ids = [self.device.index] if self.device.type in ("cuda", "npu") else None
            model = nn.parallel.DistributedDataParallel(
                model, device_ids=ids, find_unused_parameters=self.opts.find_unused_parameters
            )
        spec = workload.spec
        optimizer = build_optimizer(spec.optimizer, raw.parameters())
        scheduler = build_scheduler(spec.schedule, optimizer, spec.budget.max_steps)
        dtype = DTYPES[opts.precision]
        if dtype is not torch.float32:
            device_type = self.device.autocast_type

            def autocast():
                return torch.autocast(device_type=device_type, dtype=dtype)

            self._autocast = autocast
        scaler = torch.amp.GradScaler(self.device.type) if opts.precision == "fp16" else None
        self.workload = workload
        return TrainState(model=model, raw_model=raw, optimizer=optimizer, scheduler=scheduler, scaler=scaler)

    def train_step(self, state: TrainState, batch: Batch) -> StepOut:
        batch = to_device(batch, self.device.torch)
        opt = state.optimizer
        opt.zero_grad(set_to_none=True)
        with self._autocast():
            loss = self.workload.loss(state.model, batch)
        if state.scaler is not None:
            state.scaler.scale(loss).backward()
            if self.opts.grad_clip:
                state.scaler.unscale_(opt)
                nn.utils.clip_grad_norm_(state.raw_model.parameters(), self.opts.grad_clip)
            state.scaler.step(opt)
            state.scaler.update()
        else:
            loss.backward()
            if self.opts.grad_clip:
                nn.utils.clip_grad_norm_(state.raw_model.parameters(), self.opts.grad_clip)
            opt.step()
        state.scheduler.step()
        return StepOut(loss.detach())

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

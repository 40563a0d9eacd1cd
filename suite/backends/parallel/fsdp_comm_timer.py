"""Each rank's time inside FSDP2's collectives per step, for straggler detection (suite/execution/ranks.py), as
allreduce_timer.py does for DDP's all-reduce.

Under FSDP2 the ranks meet in every block's parameter all-gather (forward, and backward again when resharded) and in
every block's gradient reduce-scatter (backward); a rank slowed anywhere in its step is waited for by its peers
inside the next of these, and every rank then reaches the stop agreement together. FSDP2 lets a module's collectives
be replaced (`FSDPModule.set_custom_all_gather` / `set_custom_reduce_scatter`, torch 2.13): the ones here make the
same calls as torch's defaults (`DefaultAllGather`, `DefaultReduceScatter`) and add up, per optimizer step, the
seconds this rank spent inside them; the reduce-scatter's share is kept apart too. The collective ends for all ranks
at once, so the rank that arrives last spends the least time in them.

Host time measures the wait only where the host waits for the collective: gloo on CPU. Under NCCL the call returns
once the collective is queued on its stream, so the timer is attached on CPU only; an asynchronous all-gather
(`unshard_async_op`, not set here) would be timed up to its launch only.
"""

from __future__ import annotations

import time
from typing import Any

from torch import nn


class FsdpCommTimer:
    """Per optimizer step: this rank's seconds inside FSDP2's all-gathers and reduce-scatters (`spans_s`), and inside
    the reduce-scatters alone (`reduce_scatter_s`)."""

    def __init__(self) -> None:
        self.spans_s: list[float] = []
        self.reduce_scatter_s: list[float] = []
        self._step_s = 0.0
        self._rs_s = 0.0

    def comms(self) -> tuple[Any, Any]:
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
            DefaultAllGather,
            DefaultReduceScatter,
        )

        timer = self

        class TimedAllGather(DefaultAllGather):
            def __call__(self, output_tensor, input_tensor, group, async_op=False):  # type: ignore[no-untyped-def]
                t = time.perf_counter()
                work = super().__call__(output_tensor, input_tensor, group, async_op)
                timer._step_s += time.perf_counter() - t
                return work

        class TimedReduceScatter(DefaultReduceScatter):
            def __call__(self, output_tensor, input_tensor, group, op, async_op=False):  # type: ignore[no-untyped-def]
                t = time.perf_counter()
                work = super().__call__(output_tensor, input_tensor, group, op, async_op)
                span = time.perf_counter() - t
                timer._step_s += span
                timer._rs_s += span
                return work

        return TimedAllGather(), TimedReduceScatter()

    def _end_step(self, *_: Any) -> None:
        self.spans_s.append(self._step_s)
        self.reduce_scatter_s.append(self._rs_s)
        self._step_s = self._rs_s = 0.0

    def attach(self, model: nn.Module, optimizer: Any, device_type: str) -> bool:
        """Time every FSDP2 module of `model` (on CPU); a step ends with the optimizer's. False: nothing to time."""
        from torch.distributed.fsdp import FSDPModule

        sharded = [m for m in model.modules() if isinstance(m, FSDPModule)]
        if not sharded or device_type != "cpu" or optimizer is None:
            return False
        for module in sharded:
            all_gather, reduce_scatter = self.comms()
            module.set_custom_all_gather(all_gather)
            module.set_custom_reduce_scatter(reduce_scatter)
        optimizer.register_step_post_hook(self._end_step)
        return True

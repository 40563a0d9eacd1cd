"""Each rank's time inside a step's gradient all-reduce (DDP), for straggler detection (suite/execution/ranks.py).

A rank slowed before the all-reduce (a slower forward or backward, a busy core) does not come last to the stop
agreement after the step: its peers wait for it inside the all-reduce instead, and every rank's step takes as long.
Inside the collective the wait shows: DDP's comm hook here launches each bucket's all-reduce exactly as DDP's default
hook does (torch's `default_hooks.allreduce_hook`: divide by the world size, then sum) and times, per backward pass,
from the first bucket's launch on this rank to the completion of the last one. The collective ends for all ranks at
once, so the rank that arrives last spends the least time in it: the same rule as the stop agreement's waits.
"""

from __future__ import annotations

import time
from typing import Any


class AllreduceTimer:
    """A DDP comm hook that records, per backward pass with gradient sync, this rank's seconds in the all-reduce."""

    def __init__(self) -> None:
        self.spans_s: list[float] = []  # one per synchronised backward: one per step
        self._start: float | None = None

    def hook(self, process_group, bucket):  # type: ignore[no-untyped-def] # DDP refuses other annotations
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        if self._start is None:
            self._start = time.perf_counter()
        fut = default_hooks.allreduce_hook(process_group, bucket)
        if not bucket.is_last():
            return fut

        def done(f: Any) -> Any:
            if self._start is not None:
                self.spans_s.append(time.perf_counter() - self._start)
            self._start = None
            return f.value()

        return fut.then(done)

    def attach(self, ddp_model: Any) -> AllreduceTimer:
        ddp_model.register_comm_hook(None, self.hook)
        return self

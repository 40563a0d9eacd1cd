"""The peak memory of one training step as torch's own MemTracker counts it, for the memory estimators' tests
(tests/measure/test_llm_memory.py, test_memory_lora.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.distributed._tools.mem_tracker import MemTracker
from torch.nn.attention import SDPBackend, sdpa_kernel

# torch's own choice on CPU (flash attention, math where it cannot), set explicitly: a library imported earlier in
# the same process (a test worker runs many files) may have switched flash attention off globally, which keeps the
# full attention matrix (+30% in the LoRA test)
ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]


def second_step_peak(step: Callable[[], None], *tracked: torch.nn.Module | torch.optim.Optimizer) -> int:
    """Peak CPU bytes of the second call of `step` (the optimizer's state exists, as in every later step), with the
    model and optimizer tracked as MemTracker's external state."""
    with sdpa_kernel(ATTENTION):
        step()
    tracker = MemTracker()
    tracker.track_external(*tracked)
    with tracker, sdpa_kernel(ATTENTION):
        step()
    return int(tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"])

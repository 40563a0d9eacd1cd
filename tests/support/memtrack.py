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


def in_fresh_process(module: str, call: str) -> object:
    """`call` evaluated in a test module of tests/measure, in a fresh interpreter: its JSON result. A test
    worker that ran other test files first carries process-wide state a peak depends on: after the whole suite the
    LoRA fp32 peak came out 17% above a fresh process's (16.19 vs 13.83 MB), the MoE bf16 one 13% below, both
    reproducibly; a measurement must not depend on which files ran before it."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    code = (f"import json, sys; sys.path[:0] = [{str(tests.parent)!r}, {str(tests)!r}, {str(tests / 'measure')!r}]; "
            f"import torch; torch.set_num_threads(1); import {module} as m; print(json.dumps(eval({call!r}, vars(m))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])

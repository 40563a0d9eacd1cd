"""How a run's ending is recognized: SIGINT/SIGTERM become a stop flag the loop reads (the run ends `interrupted`
with what it measured), an allocation failure is named out of memory, an error keeps a short traceback."""

from __future__ import annotations

import signal
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import torch


class StopFlag:
    def __init__(self) -> None:
        self.signum: int | None = None
        self.reason: str | None = None  # why, when it was not a signal the user sent (the launcher died)


@contextmanager
def signals_to_flag(flag: StopFlag) -> Iterator[None]:
    """SIGINT/SIGTERM end the run cleanly as `interrupted` (with what was measured), instead of killing it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        if flag.signum is not None:  # a second signal: the user means it
            raise KeyboardInterrupt
        flag.signum = signum

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


OOM_HINT = "try a smaller data.batch_size, or bf16"


def out_of_memory(exc: BaseException) -> bool:
    """A device or host allocation failed: torch's OutOfMemoryError, MemoryError, or the CPU allocator's error."""
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "can't allocate memory" in str(exc)


def short_traceback(exc: BaseException, limit: int = 12) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "\n".join(text.splitlines()[-limit * 2 :])[-4000:]

"""SIGTERM to an A/B or bisect driver unwinds as Ctrl-C does (issue 50 item 6): every side is stopped and the turns'
folder removed, instead of the driver ending at once and leaving its sides running."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """SIGTERM to the driver: unwinds as Ctrl-C does, so every side is stopped and the FIFOs' folder removed."""


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """SIGTERM raises Terminated in the main thread while the sides run (its default would end the driver at once
    and leave them running, writing results after it, with their turn folder in the temp dir: issue 50 item 6)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)

"""Live progress lines on stderr. Progress can never end a run: a closed or broken stderr is ignored."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from suite.loop.contract import Progress, ProgressFn


def _write(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # the reader went away (a killed parent, a closed pipe): keep training
        pass


def printer(enabled: bool) -> ProgressFn:
    """A line at init, at most one a second while training, one at the end."""
    last = [0.0]

    def show(p: Progress) -> None:
        if not enabled:
            return
        head = f"[{p.workload} seed {p.seed}]"
        now = time.monotonic()
        if p.event == "init":
            _write(f"{head} init ...")
        elif p.event in ("step", "eval"):
            if now - last[0] < 1.0:
                return
            last[0] = now
            line = f"{head} step {p.step:>6}  {p.elapsed_s:7.1f}s"
            if p.loss is not None:
                line += f"  loss {p.loss:.4f}"
            if p.event == "eval" and p.metric is not None:
                line += f"  eval {p.metric:.4f} (target {p.target})"
            _write(line)
        elif p.event == "stop":
            _write(f"{head} {p.status} after {p.step} steps, {p.elapsed_s:.1f}s")

    return show

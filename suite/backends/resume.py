"""Checkpoints of a run (`--checkpoint-every`, a spec's `checkpoint:` block) and the restore of a restarted job.

Format: torch.distributed.checkpoint (DCP) for the model and optimizer (`get_state_dict` / `set_state_dict`, so a
plain module, DDP and FSDP2 save and load alike), saved with `async_save` where the spec asks (the default): the
step blocks only while the state is staged, the write runs in the background. Beside it, per rank, a small
torch.save file: RNG states (torch, numpy, random), the scheduler's and scaler's state, the harness's counters and
its wall-clock account so far. A checkpoint counts only once it is complete: rank 0 writes `latest` (atomically)
when its save has finished, and DCP finishes on rank 0 only after every rank's part is written.

The data order is restored by replaying the batch iterator to the checkpoint's step (the readers are deterministic
per seed and epoch), before the RNG states are set, so a reader that draws from the global RNG leaves it as the
uninterrupted run left it.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT = "torch.distributed.checkpoint"
# DCP says so on every single-process save and load; that is this module's intent, not news
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
DIR_ENV = "TRAINBENCH_CHECKPOINT_DIR"
LATEST = "latest"


def default_root(run_id: str) -> Path:
    """Where a run's checkpoints go: $TRAINBENCH_CHECKPOINT_DIR/<run id>, else the system's temporary folder. The
    run id is the same on every attempt of a job (torchrun restarts the same job file), so a restart finds them."""
    base = os.environ.get(DIR_ENV) or os.path.join(tempfile.gettempdir(), "trainbench-checkpoints")
    return Path(base) / run_id


def parse_every(text: str) -> dict[str, Any]:
    """`--checkpoint-every`'s value as spec overrides (suite/spec/schema.py CheckpointSpec.flag_overrides)."""
    from suite.spec import CheckpointSpec

    return CheckpointSpec.flag_overrides(text)


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class Checkpointer:
    """Saves and restores one rank's part of a run's checkpoints. `spec` is the spec's CheckpointSpec (or None:
    nothing is saved, but a restarted job still restores what an earlier attempt saved)."""

    def __init__(self, spec: Any, root: Path, rank: int, world: int, fmt: str = FORMAT):
        self.spec, self.root, self.rank, self.world = spec, root, rank, world
        self.format = fmt  # FORMAT, or an engine's own (its backend's save_checkpoint / load_checkpoint write it)
        self.pending: tuple[Future[Any], int, Path] | None = None  # an asynchronous save in flight
        self.saves: list[dict[str, Any]] = []
        self.last_save = time.perf_counter()
        self.asynchronous = bool(spec and spec.asynchronous) and fmt == FORMAT  # an engine's own save blocks here
        self.group: Any = None
        if self.asynchronous and world > 1:  # the background write's collectives must not meet the step's
            import torch.distributed as dist

            self.group = dist.new_group(backend="gloo")
        self.restored_step: int | None = None

    # ---- saving --------------------------------------------------------------------------------------------

    def due(self, step: int, now: float) -> bool:
        s = self.spec
        if s is None:
            return False
        if s.every_steps and step % s.every_steps == 0:
            return True
        return bool(s.every_s and now - self.last_save >= s.every_s)

    def save(self, step: int, app_state: dict[str, Any] | None, extra: dict[str, Any],
             own: Callable[[Path], None] | None = None) -> float:
        """Save this rank's part at `step`; returns the seconds the caller was blocked (waiting for the previous
        asynchronous save included). `own`: the engine's own save into the step's folder instead of DCP's (every
        rank calls it; it returns once every rank's part is written, as DeepSpeed's save_checkpoint does)."""
        import torch.distributed.checkpoint as dcp

        t = time.perf_counter()
        self.wait()
        folder = self.root / f"step-{step:09d}"
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(extra, folder / f"extra-rank{self.rank}.pt")
        if own is not None:
            own(folder)
            if self.rank == 0:
                self._complete(None, step, folder)
        elif self.asynchronous:
            assert app_state is not None
            fut = dcp.async_save(app_state, checkpoint_id=str(folder), process_group=self.group)
            self.pending = (fut, step, folder)
            if self.rank == 0:  # marked complete as soon as it is, even if this process dies later
                fut.add_done_callback(lambda f, s=step, d=folder: self._complete(f, s, d))
        else:
            assert app_state is not None
            dcp.save(app_state, checkpoint_id=str(folder))
            if self.rank == 0:
                self._complete(None, step, folder)
        blocked = time.perf_counter() - t
        self.last_save = time.perf_counter()
        self.saves.append({"step": step, "blocking_s": blocked})
        return blocked

    def _complete(self, fut: Future[Any] | None, step: int, folder: Path) -> None:
        if fut is not None and fut.exception() is not None:
            return  # a failed save is not a checkpoint: `latest` keeps naming the previous one
        tmp = self.root / f".{LATEST}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(json.dumps({"step": step, "dir": folder.name, "bytes": _dir_bytes(folder)}))
        os.replace(tmp, self.root / LATEST)

    def wait(self) -> float:
        """Wait for an asynchronous save in flight; returns the seconds waited."""
        t = time.perf_counter()
        if self.pending is not None:
            fut, step, folder = self.pending
            self.pending = None
            fut.result()
            if self.rank == 0:  # the done-callback may still be running: mark it here too (an atomic replace)
                self._complete(fut, step, folder)
        return time.perf_counter() - t

    # ---- restoring -----------------------------------------------------------------------------------------

    def latest(self) -> tuple[int, Path] | None:
        try:
            info = json.loads((self.root / LATEST).read_text())
            return int(info["step"]), self.root / str(info["dir"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def load(self, app_state: dict[str, Any] | None, folder: Path,
             own: Callable[[Path], None] | None = None) -> dict[str, Any]:
        """Load this rank's part of the checkpoint in `folder` into `app_state` (in place), or with the engine's own
        load (`own`); returns its extra."""
        import torch.distributed.checkpoint as dcp

        if own is not None:
            own(folder)
        else:
            dcp.load(app_state, checkpoint_id=str(folder))
        return torch.load(folder / f"extra-rank{self.rank}.pt", weights_only=False)  # noqa: S614 - our own file

    def record(self) -> dict[str, Any]:
        """What Result.goodput.checkpoint says: saves, format, blocking seconds, bytes of the newest."""
        if not self.saves and self.restored_step is None:
            return {}
        latest = None
        try:
            latest = json.loads((self.root / LATEST).read_text())
        except (OSError, ValueError):
            pass
        blocking = [s["blocking_s"] for s in self.saves]
        return {"format": self.format, "asynchronous": self.asynchronous, "saves": len(self.saves),
                "steps": [s["step"] for s in self.saves], "blocking_s": blocking,
                "blocking_total_s": sum(blocking), "bytes": latest.get("bytes") if latest else None,
                "every_steps": getattr(self.spec, "every_steps", None), "every_s": getattr(self.spec, "every_s", None),
                "dir": str(self.root), "restored_from_step": self.restored_step}


def step_of(folder: Path) -> int:
    """The step a checkpoint folder holds (`step-000000020` -> 20)."""
    return int(folder.name.removeprefix("step-"))


def replay(batches: Any, steps: int) -> None:
    """Consume the batches of the first `steps` steps, as the interrupted attempt consumed them."""
    for _ in range(steps):
        next(batches)


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["random"])

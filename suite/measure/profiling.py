"""`trainbench run --profile`: a torch.profiler Chrome/Perfetto trace of a window of steps after warm-up, and
NVTX ranges (step, forward, backward, optimizer, eval) on CUDA so that Nsight Systems shows the phases.

The ranges are put on from outside the backend, by hooks on the single-device model (forward pre/post
hooks; a gradient hook on the model's output marks the start of backward) and on the torch optimizer (step
pre/post hooks), so every backend gets them without code of its own. Hooks are attached only when asked
(`--profile` or `--nvtx`): a plain run's module has no hooks that could perturb torch.compile.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class ProfileWindow:
    skip_first: int = 5  # warm-up steps not traced at all (lazy init, compile, allocator growth)
    warmup: int = 2  # traced but discarded (profiler start-up overhead)
    active: int = 5  # the steps in the trace

    @property
    def last_step(self) -> int:
        return self.skip_first + self.warmup + self.active


def _first_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (list, tuple)):
        for o in out:
            t = _first_tensor(o)
            if t is not None:
                return t
    if isinstance(out, dict):
        for o in out.values():
            t = _first_tensor(o)
            if t is not None:
                return t
    return None


class Nvtx:
    """NVTX ranges on CUDA; a no-op object elsewhere (the CPU build of torch has no NVTX)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and torch.cuda.is_available()
        self.depth = 0  # ranges this object opened and has not closed: closed at step end whatever happened
        self._handles: list[Any] = []
        self._state = {"in_backward": False}

    def push(self, name: str) -> None:
        if self.enabled:
            torch.cuda.nvtx.range_push(name)
            self.depth += 1

    def pop(self) -> None:
        if self.enabled and self.depth > 0:
            torch.cuda.nvtx.range_pop()
            self.depth -= 1

    def pop_all(self) -> None:
        while self.depth:
            self.pop()

    @contextmanager
    def range(self, name: str):
        self.push(name)
        try:
            yield
        finally:
            self.pop()

    def attach(self, model: nn.Module, optimizer: Any) -> None:
        """Hooks that open/close forward, backward and optimizer ranges inside each step's range."""
        if not self.enabled:
            return
        state = self._state

        def fwd_pre(_m, _args):
            self.push("forward")

        def fwd_post(_m, _args, out):
            self.pop()
            t = _first_tensor(out)
            if t is not None and t.requires_grad:
                def grad_hook(grad):  # the first gradient reaching the model's output: backward begins
                    if not state["in_backward"]:
                        state["in_backward"] = True
                        self.push("backward")
                    return grad

                t.register_hook(grad_hook)

        def opt_pre(_opt, _args, _kwargs):
            if state["in_backward"]:
                state["in_backward"] = False
                self.pop()
            self.push("optimizer")

        def opt_post(_opt, _args, _kwargs):
            self.pop()

        self._handles += [model.register_forward_pre_hook(fwd_pre), model.register_forward_hook(fwd_post)]
        opt = getattr(optimizer, "optimizer", optimizer)  # DeepSpeed/Megatron wrappers hold a torch optimizer
        if isinstance(opt, torch.optim.Optimizer):
            self._handles += [opt.register_step_pre_hook(opt_pre), opt.register_step_post_hook(opt_post)]

    def step_end(self) -> None:
        if self.enabled:
            self._state["in_backward"] = False
            self.pop_all()

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self.pop_all()


class Profiler:
    """torch.profiler over a window of steps; writes one Chrome trace JSON into `out_dir`."""

    def __init__(self, out_dir: Path, name: str, device_type: str, window: ProfileWindow | None = None):
        from torch.profiler import ProfilerActivity, profile, schedule

        self.window = window or ProfileWindow()
        self.path = Path(out_dir) / f"{name}.pt.trace.json"
        self.written: Path | None = None
        activities = [ProfilerActivity.CPU]
        if device_type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        w = self.window
        self._prof = profile(
            activities=activities,
            schedule=schedule(skip_first=w.skip_first, wait=0, warmup=w.warmup, active=w.active, repeat=1),
            on_trace_ready=self._export,
            record_shapes=True,
            profile_memory=True,
            with_stack=False,
        )
        self.steps = 0
        self._running = False

    def _export(self, prof: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.path))
        self.written = self.path

    def start(self) -> None:
        self._prof.start()
        self._running = True

    def step(self) -> None:
        if self._running:
            self._prof.step()
            self.steps += 1
            if self.steps >= self.window.last_step:
                self.stop()  # the window is done: later steps run without profiler overhead

    def stop(self) -> None:
        if self._running:
            self._running = False
            self._prof.stop()

    def warning(self) -> str | None:
        if self.written is None:
            return (f"--profile: the run ended after {self.steps} steps, before the profiling window "
                    f"(steps {self.window.skip_first + self.window.warmup + 1}-{self.window.last_step}); no trace")
        return None

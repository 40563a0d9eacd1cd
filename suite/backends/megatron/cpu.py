"""Megatron-core on a CPU build of torch: its CUDA-only hooks mapped onto the CPU for one run, reversibly (FACTS.md)."""

from __future__ import annotations

import importlib
from typing import Any

import torch

_MISSING = object()


class _CpuTorch:
    """`torch` as Megatron's pipeline schedules see it on CPU: `torch.zeros(..., device="cuda")` lands on the CPU."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def zeros(*args: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
        return torch.zeros(*args, device="cpu" if device == "cuda" else device, **kwargs)


class CpuShim:
    """Maps Megatron's CUDA-only RNG tracker and `torch.cuda.current_device()` onto the CPU, reversibly.

    Megatron-core 0.16 calls `torch.cuda.current_device()` to place tensors and keeps a "CUDA" RNG state
    for tensor-parallel dropout; neither exists in a CPU build of torch. The shim replaces exactly those
    hooks while a Megatron run is live and restores them in `remove()`; nothing else in torch is touched.
    """

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, getattr(owner, name, _MISSING)))
        setattr(owner, name, value)

    def install(self) -> None:
        from megatron.core.tensor_parallel import random as mrandom

        self._patch(torch.cuda, "current_device", lambda: "cpu")
        self._patch(mrandom, "_get_cuda_rng_state", lambda *a, **k: torch.get_rng_state())
        self._patch(mrandom, "_set_cuda_rng_state", lambda state, *a, **k: torch.set_rng_state(state))
        # CudaRNGStatesTracker.add seeds a fresh state with torch.cuda.manual_seed / get_rng_state
        self._patch(mrandom.CudaRNGStatesTracker, "add", _cpu_tracker_add)
        # the pipeline schedules count tokens in a `device="cuda"` tensor, and p2p syncs the CUDA stream
        schedules = importlib.import_module("megatron.core.pipeline_parallel.schedules")
        self._patch(schedules, "torch", _CpuTorch())
        self._patch(torch.cuda, "synchronize", lambda *a, **k: None)
        # a pipeline's last stage moves its copy of a tied embedding with `.cuda()` before the first all-reduce
        self._patch(torch.Tensor, "cuda", lambda t, *a, **k: t)
        # without Transformer Engine, megatron-core 0.16's MoE router reads `te_general_gemm`, which its guarded
        # import then never defined (NameError); None selects its own torch.mm path
        moe_utils = importlib.import_module("megatron.core.transformer.moe.moe_utils")
        if not hasattr(moe_utils, "te_general_gemm"):
            self._patch(moe_utils, "te_general_gemm", None)

    def remove(self) -> None:
        while self._saved:
            owner, name, value = self._saved.pop()
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


def _cpu_tracker_add(self: Any, name: str, seed: int) -> None:
    self._is_initialized = True
    if seed in self.seeds_ or name in self.states_:
        raise Exception(f"rng state {name!r} / seed {seed} already exists")
    self.seeds_.add(seed)
    self.states_[name] = torch.Generator().manual_seed(seed).get_state()

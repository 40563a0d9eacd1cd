"""Precision recipes: fp32, bf16 autocast, fp16 autocast with dynamic loss scaling, bf16 weights + fp32 masters.

A recipe the device cannot do is refused before the run starts, with the reason: the check is a real probe
(a tiny forward and backward under the recipe on that device), plus the known hardware rule where there is
one (CUDA bf16 needs compute capability 8.0+), so an unsupported combination is never discovered mid-run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    autocast_dtype: torch.dtype | None  # None: no autocast
    weights_dtype: torch.dtype
    loss_scaling: bool = False
    fp32_master: bool = False
    float8: bool = False  # Linear matmuls in float8 through torchao (suite/algorithms/float8.py)


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("fp32", "fp32 weights and math", None, torch.float32),
        Recipe("bf16", "fp32 weights, bf16 autocast", torch.bfloat16, torch.float32),
        Recipe("fp16", "fp32 weights, fp16 autocast, dynamic loss scaling (GradScaler)", torch.float16,
               torch.float32, loss_scaling=True),
        Recipe("bf16_master", "bf16 weights and grads, fp32 master copies stepped by the optimizer",
               torch.bfloat16, torch.bfloat16, fp32_master=True),
        Recipe("float8", "fp32 weights, float8 matmuls in the Linear layers (torchao, dynamic tensorwise "
               "scaling), bf16 autocast elsewhere; CUDA compute capability 8.9+", torch.bfloat16, torch.float32,
               float8=True),
    )
}


class PrecisionUnsupported(RuntimeError):
    pass


def recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise PrecisionUnsupported(f"--precision {name!r}: expected one of {', '.join(RECIPES)}")
    return RECIPES[name]


def autocast_type(device_type: str) -> str:
    return "cuda" if device_type == "cuda" else device_type


def unsupported_reason(name: str, device_type: str) -> str | None:
    """Why this device cannot run the recipe, or None when it can (probed, not assumed)."""
    rec = recipe(name)
    if rec.float8:
        from suite.algorithms import float8

        reason = float8.unsupported_reason(device_type)
        if reason:
            return f"{name}: {reason}"
    if rec.autocast_dtype is None:
        return None
    if device_type == "cuda" and rec.autocast_dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
        cap = torch.cuda.get_device_capability()
        return f"{name}: this GPU (compute capability {cap[0]}.{cap[1]}) has no bf16; use fp16 or fp32"
    try:
        layer = nn.Linear(8, 8).to(device_type).to(rec.weights_dtype)
        x = torch.randn(4, 8, device=device_type)
        with torch.autocast(device_type=autocast_type(device_type), dtype=rec.autocast_dtype):
            y = layer(x.to(rec.weights_dtype) if rec.fp32_master else x)
        if y.dtype is not rec.autocast_dtype:
            return f"{name}: autocast on {device_type} does not run matmuls in {rec.autocast_dtype} (got {y.dtype})"
        y.float().sum().backward()
        if rec.loss_scaling:
            torch.amp.GradScaler(device_type)
    except Exception as e:  # noqa: BLE001 - any failure means "not on this device"; say what failed
        return f"{name}: not supported on {device_type}: {type(e).__name__}: {e}"
    return None


def _cast_inputs(dtype: torch.dtype):
    def hook(_module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)

    return hook


def _outputs_to_fp32(_module: nn.Module, _args: Any, output: Any) -> Any:
    if isinstance(output, torch.Tensor) and output.is_floating_point():
        return output.float()
    return output


class Precision:
    """The recipe applied to one model: which tensors the optimizer steps, autocast, scaler, master copies."""

    def __init__(self, name: str, device_type: str):
        self.recipe = recipe(name)
        self.device_type = device_type
        self.pairs: list[tuple[nn.Parameter, nn.Parameter]] = []  # (model weight, fp32 master)
        self._master_of: dict[int, nn.Parameter] = {}

    def prepare(self, model: nn.Module) -> list[nn.Parameter]:
        """Cast the model as the recipe says; return the parameters the optimizer must step."""
        rec = self.recipe
        params = [p for p in model.parameters() if p.requires_grad]
        if not rec.fp32_master:
            return params
        model.to(rec.weights_dtype)
        # inputs follow the weights' dtype (eval runs outside autocast), outputs go back to fp32 for losses
        for module in model.modules():
            if any(True for _ in module.parameters(recurse=False)):
                module.register_forward_pre_hook(_cast_inputs(rec.weights_dtype))
        model.register_forward_hook(_outputs_to_fp32)
        params = [p for p in model.parameters() if p.requires_grad]
        for p in params:
            master = nn.Parameter(p.detach().float().clone())
            self.pairs.append((p, master))
            self._master_of[id(p)] = master
        return [m for _, m in self.pairs]

    def autocast(self) -> AbstractContextManager[Any]:
        if self.recipe.autocast_dtype is None:
            return nullcontext()
        return torch.autocast(device_type=autocast_type(self.device_type), dtype=self.recipe.autocast_dtype)

    def scaler(self) -> torch.amp.GradScaler | None:
        return torch.amp.GradScaler(self.device_type) if self.recipe.loss_scaling else None

    @torch.no_grad()
    def grads_to_master(self) -> None:
        for p, m in self.pairs:
            m.grad = None if p.grad is None else p.grad.float()
            p.grad = None  # the optimizer zeroes the masters' grads, not these

    @torch.no_grad()
    def master_to_model(self) -> None:
        for p, m in self.pairs:
            p.copy_(m)

    def aliases(self, p: nn.Parameter) -> Iterator[torch.Tensor]:
        """Every tensor holding this weight: the model's and, with masters, the fp32 copy."""
        yield p
        master = self._master_of.get(id(p))
        if master is not None:
            yield master

    def describe(self) -> dict[str, Any]:
        rec = self.recipe
        return {"name": rec.name, "description": rec.description,
                "autocast_dtype": str(rec.autocast_dtype).removeprefix("torch.") if rec.autocast_dtype else None,
                "weights_dtype": str(rec.weights_dtype).removeprefix("torch."), "loss_scaling": rec.loss_scaling,
                "fp32_master": rec.fp32_master, "float8": rec.float8}


def describe(name: str) -> dict[str, Any]:
    return Precision(name, "cpu").describe()

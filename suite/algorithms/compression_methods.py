"""The built-in compression methods (torch): gradual magnitude pruning and int8 fake-quantised training.

Their configs, the registry and the checks live in `suite.algorithms.compression`, which imports no torch, so
validating a spec stays light; these classes are imported only when a run builds its model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.nn.utils import parametrize

from suite.algorithms.compression import CompressionError

QUANT_MODULES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
Aliases = Callable[[nn.Parameter], Iterator[torch.Tensor]]


class MagnitudePruning:
    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")
        sparsity: float = Field(gt=0, lt=1, description="final share of zero weights in every pruned tensor")
        start_step: int = Field(default=0, ge=0)
        end_step: int = Field(default=200, gt=0, description="step at which the final sparsity is reached")
        every_steps: int = Field(default=10, gt=0, description="recompute the masks every N steps")

    def __init__(self, cfg: Config, model: nn.Module, total_steps: int | None = None):
        if cfg.end_step <= cfg.start_step:
            raise CompressionError("compression.end_step must be after compression.start_step")
        if total_steps is not None and cfg.end_step > total_steps:
            raise CompressionError(f"compression.end_step {cfg.end_step} is past budget.max_steps {total_steps}")
        self.cfg = cfg
        self.targets = [p for p in model.parameters() if p.ndim >= 2]
        if not self.targets:
            raise CompressionError("magnitude_prune: the model has no weight with ndim >= 2 to prune")
        self.masks: dict[int, torch.Tensor] = {}
        self.current = 0.0

    def sparsity_at(self, step: int) -> float:
        c = self.cfg
        if step < c.start_step:
            return 0.0
        progress = min(1.0, (step - c.start_step) / (c.end_step - c.start_step))
        return c.sparsity * (1.0 - (1.0 - progress) ** 3)

    @torch.no_grad()
    def after_step(self, step: int, aliases: Aliases) -> None:
        c = self.cfg
        if c.start_step <= step and ((step - c.start_step) % c.every_steps == 0 or step == c.end_step):
            self.current = self.sparsity_at(step)
            for p in self.targets:
                k = int(round(self.current * p.numel()))
                if k == 0:
                    continue
                # the k-th smallest magnitude; ties at the threshold may prune a few more
                threshold = p.detach().abs().flatten().float().kthvalue(k).values
                self.masks[id(p)] = p.detach().abs().float() > threshold
        for p in self.targets:
            mask = self.masks.get(id(p))
            if mask is not None:
                for t in aliases(p):
                    t.mul_(mask.to(t.dtype))

    def target_may_count(self) -> bool:
        return self.current >= self.cfg.sparsity - 1e-9

    def measured_sparsity(self) -> float:
        zeros = sum(int((p == 0).sum()) for p in self.targets)
        return zeros / sum(p.numel() for p in self.targets)

    def report(self) -> dict[str, Any]:
        return {"target_sparsity": self.cfg.sparsity, "scheduled_sparsity": self.current,
                "measured_sparsity": self.measured_sparsity(), "pruned_tensors": len(self.targets)}


def fake_quant_int8(x: torch.Tensor, per_channel: bool = False) -> torch.Tensor:
    """Symmetric int8 quantise-dequantise with a straight-through gradient (identity inside the range)."""
    if per_channel and x.ndim >= 2:
        absmax = x.detach().abs().reshape(x.size(0), -1).amax(dim=1).reshape(-1, *([1] * (x.ndim - 1)))
    else:
        absmax = x.detach().abs().amax()
    scale = absmax.clamp(min=1e-8) / 127.0
    q = torch.clamp(torch.round(x.detach() / scale), -127, 127) * scale
    return x + (q - x).detach()


class _WeightFakeQuant(nn.Module):
    def __init__(self, per_channel: bool):
        super().__init__()
        self.per_channel = per_channel

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return fake_quant_int8(w, self.per_channel)


def _quant_inputs(_module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    if args and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
        return (fake_quant_int8(args[0]), *args[1:])
    return args


class Int8FakeQuant:
    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")
        per_channel: bool = Field(default=True, description="one weight scale per output channel")
        activations: bool = Field(default=True, description="also fake-quantise the inputs of quantised layers")

    def __init__(self, cfg: Config, model: nn.Module, total_steps: int | None = None):
        self.cfg = cfg
        self.layers = [m for m in model.modules() if isinstance(m, QUANT_MODULES)]
        if not self.layers:
            raise CompressionError("int8_qat: the model has no Linear or Conv layer to quantise")
        for m in self.layers:
            parametrize.register_parametrization(m, "weight", _WeightFakeQuant(cfg.per_channel))
            if cfg.activations:
                m.register_forward_pre_hook(_quant_inputs)

    def after_step(self, step: int, aliases: Aliases) -> None:
        pass

    def target_may_count(self) -> bool:
        return True

    def report(self) -> dict[str, Any]:
        return {"quantised_layers": len(self.layers), "bits": 8, **self.cfg.model_dump()}

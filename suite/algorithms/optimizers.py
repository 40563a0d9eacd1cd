"""Optimizer factory: a built-in name or an import path `pkg.module:Class` from the spec's optimizer block."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import torch

from suite import registry
from suite.spec import OptimizerSpec

OPTIMIZERS: dict[str, str] = {
    "adamw": "torch.optim:AdamW",
    "adam": "torch.optim:Adam",
    "sgd": "torch.optim:SGD",
}


class OptimizerError(ValueError):
    pass


def optimizer_class(name: str) -> type:
    try:
        cls = registry.resolve(name, OPTIMIZERS, "optimizer")
    except registry.RegistryError as e:
        raise OptimizerError(f"optimizer.name: {e}") from None
    if not (inspect.isclass(cls) and issubclass(cls, torch.optim.Optimizer)):
        raise OptimizerError(f"optimizer.name: {name!r} is not a torch.optim.Optimizer subclass")
    return cls


def optimizer_kwargs(spec: OptimizerSpec, cls: type) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"lr": spec.lr, "weight_decay": spec.weight_decay, **spec.params()}
    sig = inspect.signature(cls.__init__)
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    if not accepts_any:
        unknown = sorted(k for k in kwargs if k not in sig.parameters)
        if unknown:
            allowed = ", ".join(p for p in sig.parameters if p not in ("self", "params"))
            raise OptimizerError(f"optimizer: {cls.__name__} takes no {', '.join(unknown)} (it takes: {allowed})")
    for key in ("betas",):
        if isinstance(kwargs.get(key), list):
            kwargs[key] = tuple(kwargs[key])
    return kwargs


def build_optimizer(spec: OptimizerSpec, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    cls = optimizer_class(spec.name)
    return cls(params, **optimizer_kwargs(spec, cls))

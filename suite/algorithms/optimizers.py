"""Optimizer factory: a built-in name or an import path `pkg.module:Class` from the spec's optimizer block.

Built-ins: adamw, adam (torch), sgd (torch, plain), sgd_nesterov (momentum 0.9, Nesterov), lion, muon, lars
(MLPerf ResNet-50's).
A user class must subclass torch.optim.Optimizer and take `params` first; the block's other keys are its
keyword arguments, checked against its signature before anything starts.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import torch

from suite import registry
from suite.algorithms import provenance
from suite.spec import OptimizerSpec

OPTIMIZERS: dict[str, str] = {
    "adamw": "torch.optim:AdamW",
    "adam": "torch.optim:Adam",
    "sgd": "torch.optim:SGD",
    "sgd_nesterov": "suite.algorithms.optimizers:SGDNesterov",
    "lion": "suite.algorithms.lion:Lion",
    "muon": "suite.algorithms.muon:Muon",
    "lars": "suite.algorithms.lars:LARS",
}


class OptimizerError(ValueError):
    pass


class SGDNesterov(torch.optim.SGD):
    """SGD with Nesterov momentum (Sutskever et al. 2013, torch's formulation): momentum 0.9 unless told."""

    def __init__(
        self, params: Iterable[Any], lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 0.0,
        dampening: float = 0.0,
    ):
        super().__init__(params, lr=lr, momentum=momentum, weight_decay=weight_decay, dampening=dampening,
                         nesterov=True)


def _init_signature(cls: type) -> inspect.Signature:
    return inspect.signature(cls.__init__)  # type: ignore[misc]  # the class's own __init__, self included


def optimizer_class(name: str) -> type:
    try:
        cls = registry.resolve(name, OPTIMIZERS, "optimizer")
    except registry.RegistryError as e:
        raise OptimizerError(f"optimizer.name: {e}") from None
    if not (inspect.isclass(cls) and issubclass(cls, torch.optim.Optimizer)):
        raise OptimizerError(
            f"optimizer.name: {name!r} is a {type(cls).__name__}, not a torch.optim.Optimizer subclass "
            "(write `class MyOpt(torch.optim.Optimizer)` with `__init__(self, params, lr, ...)` and `step()`)"
        )
    params = list(_init_signature(cls).parameters)
    if len(params) < 2 or params[1] != "params":
        raise OptimizerError(f"optimizer.name: {name!r}: __init__ must take `params` first (got {params[1:]})")
    return cls


def optimizer_kwargs(spec: OptimizerSpec, cls: type) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"lr": spec.lr, "weight_decay": spec.weight_decay, **spec.params()}
    sig = _init_signature(cls)
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    if not accepts_any:
        unknown = sorted(k for k in kwargs if k not in sig.parameters)
        if unknown:
            allowed = ", ".join(p for p in sig.parameters if p not in ("self", "params"))
            raise OptimizerError(f"optimizer: {cls.__name__} takes no {', '.join(unknown)} (it takes: {allowed})")
    for key, value in kwargs.items():
        default = sig.parameters[key].default if key in sig.parameters else None
        if isinstance(value, list) and (isinstance(default, tuple) or key.endswith("betas")):
            kwargs[key] = tuple(value)  # YAML has no tuples; torch checks betas with isinstance(tuple) in places
    return kwargs


def check(spec: OptimizerSpec) -> list[tuple[str, str]]:
    """Problems with the optimizer block (unresolvable import path, wrong interface, unknown kwargs)."""
    try:
        optimizer_kwargs(spec, optimizer_class(spec.name))
    except OptimizerError as e:
        loc, _, msg = str(e).partition(": ")
        return [(loc, msg)]
    return []


def describe(spec: OptimizerSpec) -> dict[str, Any]:
    """What will run: resolved class, every hyperparameter (defaults included), and where user code came from."""
    cls = optimizer_class(spec.name)
    kwargs = optimizer_kwargs(spec, cls)
    defaults = {
        k: p.default for k, p in _init_signature(cls).parameters.items()
        if k not in ("self", "params") and p.default is not inspect.Parameter.empty
        and p.kind is not p.VAR_KEYWORD
    }
    return {"name": spec.name, **provenance.of(cls), "decay_1d": spec.decay_1d,
            "hyperparameters": provenance.jsonable({**defaults, **kwargs})}


def build_optimizer(spec: OptimizerSpec, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    cls = optimizer_class(spec.name)
    kwargs = optimizer_kwargs(spec, cls)
    if spec.decay_1d:
        return cls(params, **kwargs)
    params = list(params)  # two groups: decayed matrices / kernels / embeddings, undecayed biases and norms
    groups = [{"params": [p for p in params if p.ndim >= 2]},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return cls([g for g in groups if g["params"]], **kwargs)

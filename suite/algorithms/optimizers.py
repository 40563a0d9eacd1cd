"""Optimizer factory: a built-in name or an import path `pkg.module:Class` from the spec's optimizer block.

Built-ins: adamw, adam (torch), sgd (torch, plain), sgd_nesterov (momentum 0.9, Nesterov), lion, muon, lars
(MLPerf ResNet-50's).
A user class must subclass torch.optim.Optimizer and take `params` first; the block's other keys are its
keyword arguments, checked against its signature before anything starts. A class that takes no
`weight_decay` still runs a workload whose spec sets one: the decay is then applied outside the optimizer,
decoupled as in AdamW (p <- p * (1 - lr * wd) before each step, with the group's current lr), and recorded.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import torch

from suite import registry
from suite.algorithms import provenance
from suite.algorithms.optimizer_params import OPTIMIZERS, OptimizerError, unknown_kwargs_problem
from suite.spec import OptimizerSpec


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


def takes_weight_decay(cls: type) -> bool:
    sig = _init_signature(cls)
    return "weight_decay" in sig.parameters or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


def optimizer_kwargs(spec: OptimizerSpec, cls: type) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"lr": spec.lr, **spec.params()}
    if takes_weight_decay(cls):
        kwargs["weight_decay"] = spec.weight_decay  # else decoupled, outside the optimizer: see build_optimizer
    sig = _init_signature(cls)
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    if not accepts_any:
        takes = tuple(p for p in sig.parameters if p not in ("self", "params"))
        if problem := unknown_kwargs_problem(cls.__name__, takes, kwargs):
            raise OptimizerError(problem)
    for key, value in kwargs.items():
        default = sig.parameters[key].default if key in sig.parameters else None
        if isinstance(value, list) and (isinstance(default, tuple) or key.endswith("betas")):
            kwargs[key] = tuple(value)  # YAML has no tuples; torch checks betas with isinstance(tuple) in places
    return kwargs


def check(spec: OptimizerSpec) -> list[tuple[str, str]]:
    """Problems with the optimizer block (unresolvable import path, wrong interface, unknown kwargs), the class
    imported (a built-in is checked without torch by suite/algorithms/optimizer_params.py: check)."""
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
    described = {"name": spec.name, **provenance.of(cls), "decay": spec.decay,
                 "hyperparameters": provenance.jsonable({**defaults, **kwargs})}
    if not takes_weight_decay(cls) and spec.weight_decay > 0:
        described["decoupled_weight_decay"] = {
            "value": spec.weight_decay,
            "how": "applied outside the optimizer (it takes no weight_decay): p <- p * (1 - lr * weight_decay) "
                   "before each step, lr being the param group's current learning rate",
        }
    return described


def decays(p: torch.Tensor, rule: str) -> bool:
    """Whether weight decay applies to `p` under the spec's `optimizer.decay` rule.

    matrices: parameters of 2 or more dimensions (weights of linear, conv and embedding layers); 1-D ones
    (biases, norm gains) and scalars get none. For the layers of this suite (and Megatron's) that is exactly
    Megatron-core's rule `not (name.endswith(".bias") or param.ndim == 1)`, so every backend applies the same
    rule from the parameters alone (names differ between backends; dimensions do not). DTensor and FSDP2
    parameters report their global dimensions.
    """
    return rule == "all" or p.ndim >= 2


def param_groups(spec: OptimizerSpec, params: Iterable[torch.nn.Parameter]) -> list[dict[str, Any]]:
    """The spec's weight-decay rule as torch param groups (one group when every parameter is treated alike)."""
    params = list(params)
    if not spec.weight_decay or spec.decay == "all":
        return [{"params": params}]
    decay = [p for p in params if decays(p, spec.decay)]
    rest = [p for p in params if not decays(p, spec.decay)]
    return [g for g in ({"params": decay}, {"params": rest, "weight_decay": 0.0}) if g["params"]]


def build_optimizer(spec: OptimizerSpec, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The spec's optimizer over `params`, with weight decay only where `optimizer.decay` says."""
    cls = optimizer_class(spec.name)
    kwargs = optimizer_kwargs(spec, cls)
    if getattr(cls, "groups_params_itself", False):  # e.g. Muon: takes tensors; its groups split by ndim too
        opt = cls(list(params), **kwargs)
        for group in opt.param_groups:
            if not all(decays(p, spec.decay) for p in group["params"]):
                if any(decays(p, spec.decay) for p in group["params"]):
                    raise OptimizerError(f"optimizer {spec.name}: a parameter group mixes decayed and undecayed "
                                         "parameters; set optimizer.decay: all")
                group["weight_decay"] = 0.0
    else:
        opt = cls(param_groups(spec, params), **kwargs)
    if not takes_weight_decay(cls) and spec.weight_decay > 0:
        add_decoupled_weight_decay(opt, spec.weight_decay, spec.lr, spec.decay)
    return opt


def add_decoupled_weight_decay(optimizer: torch.optim.Optimizer, weight_decay: float, default_lr: float,
                               rule: str = "matrices") -> None:
    """Decay the parameters the spec's `optimizer.decay` rule names, by lr * weight_decay before each optimizer
    step (AdamW's decoupled form; the lr follows the schedule, as the schedulers write it into each group)."""

    def decay(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        with torch.no_grad():
            for group in opt.param_groups:
                if group.get("weight_decay") == 0.0:
                    continue  # a group the rule exempts
                factor = 1.0 - float(group.get("lr", default_lr)) * weight_decay
                for p in group["params"]:
                    if p.grad is not None and decays(p, rule):
                        p.mul_(factor)

    optimizer.register_step_pre_hook(decay)

"""The built-in optimizers described without torch: each name's class and the keyword arguments its `__init__` takes,
so spec validation checks a built-in's block before anything imports torch (suite/algorithms/optimizers.py builds
the class, and checks the same kwargs against the real signature again when it does).

tests/algorithms/test_optimizer_params.py holds each description to the installed class's signature. An import path
`pkg.module:Class` (user code) is checked by importing it: suite.algorithms.optimizers.optimizer_class.
"""

from __future__ import annotations

from typing import Any

OPTIMIZERS: dict[str, str] = {
    "adamw": "torch.optim:AdamW",
    "adam": "torch.optim:Adam",
    "sgd": "torch.optim:SGD",
    "sgd_nesterov": "suite.algorithms.optimizers:SGDNesterov",
    "lion": "suite.algorithms.lion:Lion",
    "muon": "suite.algorithms.muon:Muon",
    "lars": "suite.algorithms.lars:LARS",
}

# name -> (class name, the keyword arguments of its __init__ after `params`, in signature order)
BUILTIN_PARAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "adamw": ("AdamW", ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "foreach", "capturable",
                        "differentiable", "fused")),
    "adam": ("Adam", ("lr", "betas", "eps", "weight_decay", "amsgrad", "foreach", "maximize", "capturable",
                      "differentiable", "fused", "decoupled_weight_decay")),
    "sgd": ("SGD", ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize", "foreach", "differentiable",
                    "fused")),
    "sgd_nesterov": ("SGDNesterov", ("lr", "momentum", "weight_decay", "dampening")),
    "lion": ("Lion", ("lr", "betas", "weight_decay")),
    "muon": ("Muon", ("lr", "momentum", "nesterov", "ns_steps", "weight_decay", "adamw_lr", "adamw_betas",
                      "adamw_eps")),
    "lars": ("LARS", ("lr", "momentum", "weight_decay", "eeta", "epsilon", "nesterov")),
}


# import paths the shipped specs name (the suite's own classes and torch's), described the same way
PATH_PARAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "torch.optim:Adagrad": ("Adagrad", ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps", "foreach",
                                        "maximize", "differentiable", "fused")),
    "suite.algorithms.airbench:AirbenchSGD": ("AirbenchSGD", ("lr", "momentum", "weight_decay", "bias_scaler",
                                                              "batch_size")),
    "suite.algorithms.dense_sparse:AdamRowWiseAdagrad": ("AdamRowWiseAdagrad", ("lr", "betas", "eps", "weight_decay")),
}


def described(name: str) -> tuple[str, tuple[str, ...]] | None:
    """A spec's `optimizer.name` (a built-in or an import path) -> (class name, its keyword arguments), where described;
    None: the class is imported to be checked."""
    return BUILTIN_PARAMS.get(name) or PATH_PARAMS.get(name)


class OptimizerError(ValueError):
    pass


def unknown_kwargs_problem(cls_name: str, takes: tuple[str, ...], kwargs: dict[str, Any]) -> str | None:
    """`optimizer: <Class> takes no <keys> (it takes: ...)`, or None when the class takes every key."""
    unknown = sorted(k for k in kwargs if k not in takes)
    if unknown:
        return f"optimizer: {cls_name} takes no {', '.join(unknown)} (it takes: {', '.join(takes)})"
    return None


def check(spec: Any) -> list[tuple[str, str]]:
    """Problems with a built-in optimizer's block (unknown kwargs), from its description: no torch. An import path is
    checked by suite.algorithms.optimizers.check (it imports the user's class)."""
    cls_name, takes = described(spec.name) or BUILTIN_PARAMS[spec.name]
    kwargs: dict[str, Any] = {"lr": spec.lr, **spec.params()}
    if "weight_decay" in takes:
        kwargs["weight_decay"] = spec.weight_decay
    if problem := unknown_kwargs_problem(cls_name, takes, kwargs):
        loc, _, msg = problem.partition(": ")
        return [(loc, msg)]
    return []

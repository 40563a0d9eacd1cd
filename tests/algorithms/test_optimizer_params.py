"""The built-in optimizers' torch-free descriptions (suite/algorithms/optimizer_params.py, what spec validation checks
an optimizer block against) are the installed classes' signatures, so a spec refused or passed without torch is
refused or passed the same way when the class is built."""

from __future__ import annotations

import inspect

import pytest

from suite import registry
from suite.algorithms import optimizer_params


@pytest.mark.parametrize("name", [*optimizer_params.OPTIMIZERS, *optimizer_params.PATH_PARAMS])
def test_each_description_is_the_class_signature(name: str) -> None:
    import torch

    cls = registry.resolve(optimizer_params.OPTIMIZERS.get(name, name), kind="optimizer")
    assert issubclass(cls, torch.optim.Optimizer)
    sig = inspect.signature(cls.__init__)
    assert not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    takes = tuple(k for k in sig.parameters if k not in ("self", "params"))
    assert list(sig.parameters)[1] == "params"
    assert optimizer_params.described(name) == (cls.__name__, takes)


def test_every_builtin_is_described() -> None:
    assert set(optimizer_params.BUILTIN_PARAMS) == set(optimizer_params.OPTIMIZERS)


@pytest.mark.parametrize(("name", "extra"), [("sgd", {"bogus": 3}), ("lion", {"momentum": 0.9}),
                                             ("sgd_nesterov", {"betas": [0.9, 0.99]}), ("adamw", {"betas": [0.9, 0.9]}),
                                             ("muon", {}), ("lars", {"eeta": 0.001}),
                                             ("torch.optim:Adagrad", {"lr_decay": 0.0, "betas": [0.9, 0.9]}),
                                             ("suite.algorithms.airbench:AirbenchSGD", {"nesterov": True}),
                                             ("suite.algorithms.dense_sparse:AdamRowWiseAdagrad", {"eps": 1e-8})])
def test_the_torch_free_check_says_what_the_class_check_says(name: str, extra: dict) -> None:
    from suite.algorithms import optimizers
    from suite.spec import OptimizerSpec

    spec = OptimizerSpec(name=name, lr=0.1, weight_decay=0.01, **extra)
    assert optimizer_params.check(spec) == optimizers.check(spec)

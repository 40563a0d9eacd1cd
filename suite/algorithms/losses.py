"""Swappable training losses: the spec's `loss:` block names a built-in or an import path; tasks call `build`.

A loss takes `(logits, target)` with logits (..., classes) and integer targets (...), and returns a scalar.
Built-ins: cross_entropy; label_smoothing (Szegedy et al. 2016: (1 - s) * NLL + s * mean over classes of
-log p, the same definition as torch's `F.cross_entropy(label_smoothing=s)`).
A user loss is a function `fn(logits, target, **params)` or a class `Cls(**params)` whose instances are
called as `obj(logits, target)`; the block's other keys are its parameters. Evaluation metrics never use it.
A task takes a loss override by setting `loss_hook = True` (a registered task on its class in
suite/workloads/checks.py, which spec validation reads without torch) and calling `build(spec.loss)` (see
suite/workloads/image_classification.py); a spec that sets `loss:` for a task without the hook is refused.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from suite import registry
from suite.algorithms import provenance

if TYPE_CHECKING:  # torch is imported where a loss is computed: spec validation checks a `loss:` block without it
    import torch

LossFn = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]

LOSSES: dict[str, str] = {
    "cross_entropy": "suite.algorithms.losses:cross_entropy",
    "label_smoothing": "suite.algorithms.losses:label_smoothing",
}


class LossError(ValueError):
    pass


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))


def label_smoothing(logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.1) -> torch.Tensor:
    if not 0.0 <= smoothing < 1.0:
        raise LossError(f"loss.smoothing must be in [0, 1), got {smoothing}")
    import torch.nn.functional as F

    logp = F.log_softmax(logits.reshape(-1, logits.size(-1)).float(), dim=-1)
    nll = -logp.gather(-1, target.reshape(-1, 1)).squeeze(-1)
    uniform = -logp.mean(dim=-1)  # cross-entropy against the uniform distribution over classes
    return ((1.0 - smoothing) * nll + smoothing * uniform).mean()


def _resolve(name: str) -> Any:
    try:
        return registry.resolve(name, LOSSES, "loss")
    except registry.RegistryError as e:
        raise LossError(str(e)) from None


def build(loss_spec: Any, default: str = "cross_entropy") -> LossFn:
    """The loss a task trains with: the spec's `loss:` block (a LossSpec or None) or the task's default."""
    name = loss_spec.name if loss_spec is not None else default
    params = loss_spec.params() if loss_spec is not None else {}
    obj = _resolve(name)
    if inspect.isclass(obj):
        try:
            inspect.signature(obj).bind(**params)
        except TypeError as e:
            raise LossError(f"loss {name!r}: a loss class is built as Cls(**params) from the block's other keys "
                            f"({sorted(params)}), then called as obj(logits, target): {e}") from None
        fn = obj(**params)
        if not callable(fn):
            raise LossError(f"loss {name!r}: instances of {obj.__name__} are not callable as fn(logits, target)")
        return fn
    if not callable(obj):
        raise LossError(f"loss {name!r} is a {type(obj).__name__}, not a function or class")
    try:
        inspect.signature(obj).bind(None, None, **params)
    except TypeError as e:
        raise LossError(f"loss {name!r} must be fn(logits, target, **params): {e}") from None
    return functools.partial(obj, **params) if params else obj


def check(spec: Any, task_cls: Any) -> list[tuple[str, str]]:
    if spec.loss is None:
        return []
    if not getattr(task_cls, "loss_hook", False):
        return [("loss", f"task {spec.task!r} does not take a loss override (its loss is fixed by the task)")]
    try:
        build(spec.loss)
    except LossError as e:
        return [("loss", str(e))]
    return []


def describe(loss_spec: Any, default: str = "cross_entropy") -> dict[str, Any]:
    name = loss_spec.name if loss_spec is not None else default
    params = loss_spec.params() if loss_spec is not None else {}
    return {"name": name, **provenance.of(_resolve(name)), "params": provenance.jsonable(params)}

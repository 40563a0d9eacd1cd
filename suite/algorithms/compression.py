"""Compression during training: the registry, configs and checks (no torch: the methods are in compression_methods).

A method is a class with a pydantic `Config` (extra="forbid") and
`__init__(cfg, model, total_steps)` (modify the model there, before it is compiled or wrapped),
`after_step(step, aliases)` (called after every optimizer step; `aliases(p)` yields every tensor holding
weight p, fp32 masters included), `target_may_count() -> bool` (False while the method is still
converging: a run cannot reach its target before the final sparsity is in place), and `report() -> dict`.
Built-ins:
- magnitude_prune: layer-wise unstructured magnitude pruning of every weight with ndim >= 2, on the
  cubic schedule of Zhu & Gupta 2017 ("To prune, or not to prune"): s_t = s_f * (1 - (1 - p)^3), p the
  progress from start_step to end_step; pruned weights are held at zero after every step.
- int8_qat: weights fake-quantised to symmetric int8 (per output channel) and inputs of every Linear/Conv
  (per tensor, dynamic absmax), with the straight-through estimator (Jacob et al. 2018; Bengio et al. 2013).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from suite import registry
from suite.algorithms import provenance

COMPRESSION: dict[str, str] = {
    "magnitude_prune": "suite.algorithms.compression_methods:MagnitudePruning",
    "int8_qat": "suite.algorithms.compression_methods:Int8FakeQuant",
}
# backends whose train_step calls the hooks; any other backend is refused (it would silently ignore them)
SUPPORTED_BACKENDS = ("torch",)


class CompressionError(ValueError):
    pass


def method_class(name: str) -> Any:
    try:
        cls = registry.resolve(name, COMPRESSION, "compression method")
    except registry.RegistryError as e:
        raise CompressionError(str(e)) from None
    config = getattr(cls, "Config", None)
    missing = [a for a in ("after_step", "target_may_count", "report") if not callable(getattr(cls, a, None))]
    if not (isinstance(config, type) and issubclass(config, BaseModel)) or missing:
        raise CompressionError(
            f"compression method {name!r} must be a class with a pydantic Config and after_step, "
            f"target_may_count, report (missing: {', '.join(missing) or 'Config'})"
        )
    return cls


def build(spec: Any, model: Any, total_steps: int | None) -> Any:
    """The spec's `compression:` block (or None) applied to a freshly built model."""
    if spec is None:
        return None
    cls = method_class(spec.name)
    return cls(cls.Config.model_validate(spec.params()), model, total_steps)


def check(spec: Any, total_steps: int | None) -> list[tuple[str, str]]:
    if spec is None:
        return []
    try:
        cls = method_class(spec.name)
        cfg = cls.Config.model_validate(spec.params())
    except CompressionError as e:
        return [("compression", str(e))]
    except ValidationError as e:
        from suite.spec import format_validation

        return format_validation(e, "compression")
    end_step = getattr(cfg, "end_step", None)  # a method that schedules itself must finish within the budget
    if isinstance(end_step, int) and total_steps is not None and end_step > total_steps:
        return [("compression.end_step", f"{end_step} is past budget.max_steps {total_steps}")]
    return []


def describe(spec: Any) -> dict[str, Any] | None:
    if spec is None:
        return None
    cls = method_class(spec.name)
    cfg = cls.Config.model_validate(spec.params())
    return {"name": spec.name, **provenance.of(cls), "params": provenance.jsonable(cfg.model_dump())}

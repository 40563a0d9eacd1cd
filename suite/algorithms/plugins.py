"""The algorithm plug-in points of a spec, checked together at load time and described together in each result.

`check_spec` runs inside spec validation, without torch for what the suite ships: suite/algorithms/optimizer_params.py
describes the built-in optimizers (and the classes the shipped specs name by import path), the schedules, the `grpo:`
block and the losses' parameters need none. An import path that does not resolve or a class with the wrong
interface is a SpecError naming the field before anything starts. `refusals` names what a backend or device
cannot do (precision, compression). `describe` is what the result records as `config.algorithm`.
"""

from __future__ import annotations

from typing import Any

from suite import registry
from suite.algorithms import compression, grpo, grpo_agentic, losses, optimizer_params, schedules

# optimizers and precision import torch: check_spec reaches optimizers only for an optimizer not described (user
# code), refusals and describe when a run is planned


def check_spec(spec: Any) -> list[tuple[str, str]]:
    if optimizer_params.described(spec.optimizer.name) is not None:
        problems = optimizer_params.check(spec.optimizer)
    else:
        from suite.algorithms import optimizers  # user code: its module imports torch anyway

        problems = optimizers.check(spec.optimizer)
    problems += schedules.check(spec.schedule, spec.budget.max_steps)
    problems += compression.check(spec.compression, spec.budget.max_steps)
    problems += grpo_agentic.check(spec.grpo) if spec.task == "agentic_grpo" else grpo.check(spec.grpo, spec.task)
    if spec.loss is not None:
        try:
            task_cls = registry.task_checks(spec.task)  # its `loss_hook`, without torch for a registered task
        except registry.RegistryError:
            return problems  # reported as the task's problem already
        problems += losses.check(spec, task_cls)
    return problems


def refusals(spec: Any, backend: str, precision_name: str, device_type: str) -> list[str]:
    """Reasons this combination cannot run here (empty: it can)."""
    from suite.algorithms import precision

    out = []
    try:
        precision.recipe(precision_name)
    except precision.PrecisionUnsupported as e:
        return [str(e)]
    if precision_name in ("bf16_master", "float8") and backend != "torch":
        out.append(f"--precision {precision_name} is implemented by the torch backend only, not {backend!r}")
    else:
        reason = precision.unsupported_reason(precision_name, device_type)
        if reason:
            out.append(f"--precision {reason}")
    if spec.compression is not None and backend not in compression.SUPPORTED_BACKENDS:
        out.append(f"{spec.name}: compression {spec.compression.name!r} needs the torch backend "
                   f"(backend {backend!r} does not call the compression hooks)")
    return out


def describe(spec: Any, precision_name: str) -> dict[str, Any]:
    """Exactly what ran: resolved names, files and hashes of user code, every hyperparameter."""
    from suite.algorithms import losses, optimizers, precision

    loss_default = "cross_entropy"
    return {
        "optimizer": optimizers.describe(spec.optimizer),
        "schedule": schedules.describe(spec.schedule, spec.budget.max_steps),
        "loss": losses.describe(spec.loss, loss_default) if spec.loss is not None else {"name": "task default"},
        "precision": precision.describe(precision_name),
        "compression": compression.describe(spec.compression),
    }

"""airbench94's optimizer and learning-rate schedule (KellerJordan/cifar10-airbench `airbench94.py`, lines
38-48 and 352-390), for specs that name them by import path.

airbench94 states its hyperparameters in decoupled form (lr and weight decay per 1024 examples, momentum
independent of the step size) and sums the per-example losses. Our losses are batch means, so the torch SGD
arguments are its own lines 359-362 with the loss scale moved into the learning rate: SGD's update
lr * (g + wd * p) is the same for (lr_sum, wd_sum, sum loss) and (lr_sum * B, wd_sum / B, mean loss).

torch is imported when `AirbenchSGD` is first asked for (the module's `__getattr__`), not with the module: a spec that
names `schedule` is validated without torch (`trainbench spec validate`, tests/workloads/test_spec_parts.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def _define_sgd() -> type:
    import torch

    class AirbenchSGD(torch.optim.SGD):
        """Nesterov SGD with airbench's two parameter groups: BN biases (tagged `airbench_bias_scaled` by the model)
        at `bias_scaler` x the learning rate and the same absolute decay; everything else at the learning rate."""

        groups_params_itself = True  # it makes its own two groups from the tensors (build_optimizer hands it tensors)

        def __init__(self, params: Iterable[Any], lr: float = 11.5, momentum: float = 0.85,
                     weight_decay: float = 0.0153, bias_scaler: float = 64.0, batch_size: int = 1024):
            kilostep_scale = 1024 * (1 + 1 / (1 - momentum))
            lr_sum = lr / kilostep_scale  # line 360
            wd_sum = weight_decay * batch_size / kilostep_scale  # line 361
            lr_mean, lr_bias_mean = lr_sum * batch_size, lr_sum * bias_scaler * batch_size  # line 362, x B (mean loss)
            params = list(params)
            biases = [p for p in params if getattr(p, "airbench_bias_scaled", False)]
            others = [p for p in params if not getattr(p, "airbench_bias_scaled", False)]
            groups = [dict(params=biases, lr=lr_bias_mean, weight_decay=wd_sum / (lr_sum * bias_scaler) / batch_size),
                      dict(params=others, lr=lr_mean, weight_decay=wd_sum / lr_sum / batch_size)]  # lines 377-378
            super().__init__([g for g in groups if g["params"]], lr=lr_mean, momentum=momentum, nesterov=True)

    AirbenchSGD.__module__, AirbenchSGD.__qualname__ = __name__, "AirbenchSGD"  # pickled by its import path
    return AirbenchSGD


def __getattr__(name: str) -> Any:
    """`AirbenchSGD`, defined (and torch imported) on first use, then kept as a module attribute."""
    if name == "AirbenchSGD":
        cls = globals()["AirbenchSGD"] = _define_sgd()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

def schedule(step: int, total_steps: int | None) -> float:
    """Lines 381-389: linear from 0.2 to 1.0 over the first 23% of steps, then linear down to 0.07."""
    total = total_steps or 1
    warmup = int(total * 0.23)
    if step < warmup:
        frac = step / warmup
        return 0.2 * (1 - frac) + 1.0 * frac
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return 1.0 * (1 - frac) + 0.07 * frac

"""Learning-rate schedules as LambdaLR multipliers: constant, cosine, warmup-stable-decay (wsd), or user code.

A user schedule is an import path `pkg.module:fn` to `fn(step: int, total_steps: int | None) -> float`, the
multiplier of every param group's base lr at `step` (warmup_steps, if set, still ramps it up first).
wsd: linear warmup, constant, then a linear decay over the last `decay_fraction` of the steps
(Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations").
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from suite import registry
from suite.algorithms import provenance
from suite.spec import ScheduleSpec

if TYPE_CHECKING:
    import torch

BUILTIN = ("constant", "cosine", "wsd", "polynomial")
Multiplier = Callable[[int], float]


class ScheduleError(ValueError):
    pass


def user_schedule(name: str) -> Callable[[int, int | None], float]:
    try:
        fn = registry.resolve(name, None, "schedule")
    except registry.RegistryError as e:
        raise ScheduleError(f"schedule.name: {e}") from None
    if not callable(fn):
        raise ScheduleError(f"schedule.name: {name!r} is not callable; expected fn(step, total_steps) -> float")
    try:
        inspect.signature(fn).bind(0, 1)
    except (TypeError, ValueError):
        raise ScheduleError(f"schedule.name: {name!r} must take (step, total_steps) and return a float") from None
    return fn


def lr_multiplier(spec: ScheduleSpec, total_steps: int | None) -> Multiplier:
    warmup = spec.warmup_steps
    total = spec.total_steps or total_steps
    floor = spec.min_lr_ratio

    def warm(step: int) -> float | None:
        return (step + 1) / warmup if step < warmup else None

    if spec.name == "constant":
        return lambda step: warm(step) or 1.0
    if spec.name not in BUILTIN:
        if ":" not in spec.name:
            raise ScheduleError(f"schedule.name: unknown schedule {spec.name!r}; known: {', '.join(BUILTIN)} "
                                "(or an import path `pkg.module:fn`)")
        fn = user_schedule(spec.name)
        return lambda step: warm(step) or float(fn(step, total))
    if total is None:
        raise ScheduleError(f"schedule.name {spec.name!r} needs schedule.total_steps or budget.max_steps")
    if spec.name == "cosine":

        def cosine(step: int) -> float:
            w = warm(step)
            if w is not None:
                return w
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

        return cosine
    if spec.name == "polynomial":  # MLPerf ResNet-50's PolynomialDecayWithWarmup: power 2 over total - warmup + 1

        def polynomial(step: int) -> float:
            w = warm(step)
            if w is not None:
                return w
            progress = min(1.0, (step - warmup) / max(1, total - warmup + 1))
            return floor + (1 - floor) * (1 - progress) ** 2

        return polynomial
    decay_start = int(total * (1 - spec.decay_fraction))

    def wsd(step: int) -> float:
        w = warm(step)
        if w is not None:
            return w
        if step < decay_start:
            return 1.0
        progress = min(1.0, (step - decay_start) / max(1, total - decay_start))
        return floor + (1 - floor) * (1 - progress)

    return wsd


def check(spec: ScheduleSpec, total_steps: int | None) -> list[tuple[str, str]]:
    try:
        mult = lr_multiplier(spec, total_steps)
        value = mult(spec.warmup_steps)
    except ScheduleError as e:
        loc, _, msg = str(e).partition(": ")
        return [(loc, msg)]
    except Exception as e:  # noqa: BLE001 - user code: say what it raised
        return [("schedule.name", f"{spec.name!r} raised {type(e).__name__}: {e} at step {spec.warmup_steps}")]
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        return [("schedule.name", f"{spec.name!r} returned {value!r}; a multiplier must be a finite float >= 0")]
    return []


def describe(spec: ScheduleSpec, total_steps: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {**spec.model_dump(mode="json"), "total_steps_resolved": spec.total_steps or total_steps}
    if spec.name not in BUILTIN:
        out.update(provenance.of(user_schedule(spec.name)))
    return out


def build_scheduler(spec: ScheduleSpec, optimizer: torch.optim.Optimizer, total_steps: int | None):
    import torch  # here, not at the top: spec validation checks a schedule without torch

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_multiplier(spec, total_steps))

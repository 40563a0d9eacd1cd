"""Learning-rate schedules as LambdaLR multipliers: constant, cosine, warmup-stable-decay (wsd)."""

from __future__ import annotations

import math

import torch

from suite.spec import ScheduleSpec


def lr_multiplier(spec: ScheduleSpec, total_steps: int | None):
    warmup = spec.warmup_steps
    total = spec.total_steps or total_steps
    floor = spec.min_lr_ratio

    def warm(step: int) -> float | None:
        return (step + 1) / warmup if step < warmup else None

    if spec.name == "constant":
        return lambda step: warm(step) or 1.0
    if total is None:
        raise ValueError(f"schedule.name {spec.name!r} needs schedule.total_steps or budget.max_steps")
    if spec.name == "cosine":

        def cosine(step: int) -> float:
            w = warm(step)
            if w is not None:
                return w
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

        return cosine
    if spec.name == "wsd":
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
    raise ValueError(f"schedule.name: unknown schedule {spec.name!r}; known: constant, cosine, wsd")


def build_scheduler(spec: ScheduleSpec, optimizer: torch.optim.Optimizer, total_steps: int | None):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_multiplier(spec, total_steps))

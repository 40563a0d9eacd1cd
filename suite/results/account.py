"""Result.goodput's schema (schema 3): the wall-clock account of a run, its checkpoints, recoveries and ranks."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Goodput(BaseModel):
    """Where the wall clock went (suite/measure/goodput.py; every part defined in docs/metrics.md)."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")  # as every part of a Result

    wall_s: float = Field(description="process start (or harness entry, in-process) to the record, on CLOCK_BOOTTIME")
    parts_s: dict[str, float] = Field(description="startup, init, checkpoint restore, compile, steps, data wait, "
                                      "eval, checkpoint save, lost, recovery, other, teardown (seconds)")
    unaccounted_s: float = Field(description="wall_s minus the sum of the parts (measured on another clock)")
    goodput: float | None = Field(description="productive step time (parts_s.steps_s) / wall_s")
    settled_step_s: float | None = Field(default=None, description="median compute time of a step once settled")
    compile_steps: int = Field(default=0, description="steps before step time settled (their excess is compile_s)")
    startup_from: str = ""
    checkpoint: dict[str, Any] = Field(default_factory=dict, description="--checkpoint-every: saves, format, "
                                       "blocking seconds per save, bytes, asynchronous")
    recovery: dict[str, Any] = Field(default_factory=dict, description="--max-restarts: restarts, time to recover, "
                                     "steps lost")
    ranks: list[dict[str, Any]] = Field(default_factory=list, description="per rank: step-time summary (p50, p90, "
                                        "mean, steps) for straggler detection")

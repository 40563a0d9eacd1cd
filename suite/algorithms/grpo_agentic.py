"""The `grpo:` block of task agentic_grpo: GRPO's settings (suite/algorithms/grpo.py) plus how rollouts and
updates are scheduled. `rollout_mode: sync` generates each rollout in the trainer's thread with the trainer's own
model, then updates (the existing GRPO's order); `async` generates in a rollout thread on its own copy of the
policy, loaded with the trainer's weights (`weight_sync`) `staleness` updates behind: 0 waits for each update
before generating the next rollout (on-policy: the same batches and updates as sync), 1 generates rollout k+1
while update k runs (one step off-policy, MLPerf qwen35_397b_grpo's reference: NeMo-RL's async GRPO with
max_trajectory_age_steps 1). `placement: ray` runs the episodes in Ray actors (suite/workloads/agentic/ray_rollout.py),
`colocated` in the trainer's process. A rollout draws `data.batch_size` x `minibatches` tasks and is trained on for
`ppo_epochs` passes of `minibatches` updates each (veRL's ppo_mini_batch_size and ppo_epochs): one harness step is
one optimizer update, and a rollout's weights are as old as the rollouts, not the updates, before it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from suite.algorithms import grpo, grpo_rewards


class Config(grpo.Config):
    rollout_mode: Literal["sync", "async"] = "sync"
    staleness: int = Field(default=0, ge=0, le=1, description="async: updates the rollout's weights may lag "
                           "the trainer's (0 on-policy, 1 one step off-policy)")
    ppo_epochs: int = Field(default=1, ge=1, description="passes over each rollout (veRL's ppo_epochs): each "
                            "pass is `minibatches` clipped updates against the rollout's old log-probs")

    @model_validator(mode="after")
    def _agentic(self) -> Config:
        if self.rollout_mode == "sync" and self.staleness:
            raise ValueError(f"staleness {self.staleness} needs rollout_mode: async (sync is on-policy)")
        if self.old_logprob != "recompute":
            raise ValueError("task agentic_grpo recomputes old log-probs with the rollout's weights "
                             "(old_logprob: recompute)")
        return self


def check(block: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Problems of task agentic_grpo's `grpo:` block (validated with its reward) for spec load."""
    from pydantic import ValidationError

    from suite.spec import format_validation

    if block is None:
        return [("grpo", "task agentic_grpo needs a `grpo:` block (group_size, rollout, warm_start, ...)")]
    try:
        cfg = Config.model_validate(block)
    except ValidationError as e:
        return format_validation(e, "grpo")
    return grpo_rewards.check(cfg.reward)

"""GRPO (Shao et al. 2024, DeepSeekMath): the spec's `grpo:` block and its check (no torch: spec validation reads it;
the advantages and the loss are in suite/algorithms/grpo_loss.py).

Names follow veRL's (`actor_rollout_ref.actor.clip_ratio`, `kl_loss_coef`, `loss_agg_mode`, the `low_var_kl`
estimator) so that suite/backends/verl/backend.py translates the block field by field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from suite.algorithms import grpo_rewards


class Sampling(BaseModel):
    """How completions are drawn (the fields of suite.models.common.generation.Sampling, which the task builds from it)."""

    model_config = ConfigDict(extra="forbid")
    temperature: float = Field(default=1.0, ge=0, description="0: greedy")
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_new_tokens: int = Field(default=16, gt=0)
    stop_tokens: list[str] = Field(default_factory=list, description="strings of one token each that end a "
                                   "completion (the data set's end-of-answer token is always one)")


class WarmStart(BaseModel):
    """How the policy starts: supervised training on the task's own solved problems, in the untimed init, or a
    checkpoint. `checkpoint` is the seam for a Hugging Face checkpoint loader: today it takes a state dict of the
    suite's model saved with torch.save."""

    model_config = ConfigDict(extra="forbid")
    sft_steps: int = Field(default=0, ge=0, description="supervised steps on generated solved problems (untimed); "
                           "with sft_until_accuracy, the most it may take")
    sft_until_accuracy: float | None = Field(
        default=None, gt=0, le=1, description="stop the supervised phase at the first check where the policy's "
        "accuracy (eval_sampling) on the probe problems reaches this; not reaching it in sft_steps ends the run "
        "`error`. None: exactly sft_steps steps")
    sft_check_every: int = Field(default=5, gt=0, description="supervised steps between probe checks")
    probe_problems: int = Field(default=256, gt=0, description="training problems (never held-out ones) drawn from "
                                "warm_start.seed that the stopping rule scores")
    sft_lr: float = Field(default=3e-3, gt=0)
    sft_batch_size: int = Field(default=64, gt=0)
    checkpoint: str | None = Field(default=None, description="a torch.save state dict of the policy")
    seed: int = Field(default=0, ge=0, description="seeds the initial weights and the supervised data: the warm "
                      "start is the same model for every run seed")


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group_size: int = Field(default=8, description="G: completions sampled per prompt (>= 2)")
    rollout: Sampling = Sampling()
    eval_sampling: Sampling = Field(default=Sampling(temperature=0.0),
                                    description="evaluation: greedy (temperature 0) or low temperature")
    clip_ratio: float = Field(default=0.2, gt=0, lt=1)
    kl_coef: float = Field(default=0.0, ge=0, description="KL penalty to the frozen reference (0: no reference)")
    loss_agg: Literal["token", "sequence"] = Field(
        default="token", description="token: mean over all completion tokens of the batch (veRL token-mean); "
        "sequence: mean over tokens in each completion, then over completions (seq-mean-token-mean)")
    normalize_std: bool = Field(default=True, description="divide advantages by the group's std (Dr. GRPO: false)")
    old_logprob: Literal["recompute", "reuse"] = Field(
        default="recompute", description="recompute: a forward pass of the policy before the update (veRL); "
        "reuse: the sampler's log-probabilities")
    minibatches: int = Field(default=1, ge=1, description="optimizer steps per rollout (harness steps)")
    eval_batch_size: int | None = Field(default=None, gt=0, description="held-out prompts generated at once in "
                                        "an evaluation (default: all; bounds the KV cache of a large eval set)")
    reward: str | dict[str, Any] = Field(default="exact_match", description="built-in name or import path")
    placement: Literal["colocated", "ray"] = "colocated"
    rollout_workers: int = Field(default=1, ge=1, description="ray: rollout actors beside the trainer")
    warm_start: WarmStart = WarmStart()

    @field_validator("group_size")
    @classmethod
    def _group(cls, v: int) -> int:
        if v < 2:
            raise ValueError(f"group_size {v}: GRPO normalises each completion's reward over its group of G "
                             "completions of the same prompt; G < 2 leaves no group (set group_size >= 2)")
        return v

    @model_validator(mode="after")
    def _reuse(self) -> Config:
        if self.old_logprob == "reuse" and self.rollout.top_p < 1.0:
            raise ValueError("old_logprob: reuse with rollout.top_p < 1: the sampler's log-probabilities are of "
                             "the full softmax, not of the truncated distribution it drew from; use recompute")
        return self


def check(block: dict[str, Any] | None, task: str) -> list[tuple[str, str]]:
    """Problems of a spec's `grpo:` block (validated with its reward) for spec load."""
    from pydantic import ValidationError

    from suite.spec import format_validation

    if block is None:
        return ([("grpo", f"task {task} needs a `grpo:` block (group_size, rollout, reward, ...)")]
                if task in ("grpo", "agentic_grpo") else [])
    if task not in ("grpo", "agentic_grpo"):
        return [("grpo", f"a `grpo:` block is read by tasks grpo and agentic_grpo only, not {task!r}; remove it")]
    # task agentic_grpo's block (more fields) is checked by suite/algorithms/grpo_agentic.py: check(block)
    try:
        cfg = Config.model_validate(block)
    except ValidationError as e:
        return format_validation(e, "grpo")
    return grpo_rewards.check(cfg.reward)

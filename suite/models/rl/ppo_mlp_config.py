"""The pydantic `Config` of the PPO actor-critic MLP, apart from the model: what spec validation reads without importing
torch (suite/registry.py MODEL_CONFIGS). suite/models/rl/ppo_mlp.py builds from this very class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hidden: list[int] = Field(default=[64, 64], min_length=1)
    activation: str = Field(default="tanh", pattern="^(tanh|relu)$")
    log_std_init: float = 0.0

"""The pydantic `Config` of the VGG-style CNN, apart from the model: what spec validation reads without importing torch
(suite/registry.py MODEL_CONFIGS). suite/models/vision/cnn.py builds from this very class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    channels: list[int] = Field(default=[32, 64], min_length=1, description="output channels per stage")
    convs_per_stage: int = Field(default=1, ge=1)
    hidden: int = Field(default=128, gt=0, description="width of the fully connected layer")
    dropout: float = Field(default=0.0, ge=0, lt=1)

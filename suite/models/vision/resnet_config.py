"""The pydantic `Config` of the ResNet, apart from the model: what spec validation reads without importing torch
(suite/registry.py MODEL_CONFIGS). suite/models/vision/resnet.py builds from this very class.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    block: Literal["basic", "bottleneck"] = "bottleneck"
    layers: list[int] = Field(default=[3, 4, 6, 3], min_length=1)
    width: int = Field(default=64, gt=0, description="channels of the first stage (doubling per stage)")
    stem: Literal["imagenet", "cifar"] = "imagenet"
    zero_init_residual: bool = Field(default=True, description="last BN of each block starts at 0 (Goyal et al.)")
    init: Literal["torch", "he_normal"] = Field(
        default="torch", description="he_normal: MLPerf's reference (Keras he_normal convs, N(0, 0.01) head)")

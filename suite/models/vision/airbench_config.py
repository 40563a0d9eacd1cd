"""The pydantic `Config` of the airbench94 net, apart from the model: what spec validation reads without importing torch
(suite/registry.py MODEL_CONFIGS). suite/models/vision/airbench.py builds from this very class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    widths: list[int] = Field(default=[64, 256, 256], min_length=1, description="channels of each conv group")
    stem_width: int = Field(default=24, gt=0, description="whitening conv channels: 2 * 3 * 2^2 in airbench94")
    head_scale: float = Field(default=1 / 9, gt=0)
    bn_momentum: float = Field(
        default=0.6, gt=0, lt=1,
        description="airbench's convention: the running stats keep this share; PyTorch gets momentum 1 - this")
    bn_eps: float = Field(default=1e-12, gt=0)
    whiten: bool = Field(default=True, description="initialise the stem from the training images' patch covariance")
    whiten_images: int = Field(default=5000, gt=0, description="training images the whitening init uses")
    whiten_eps: float = Field(default=5e-4, gt=0)
    whiten_bias_steps: int | None = Field(
        default=None, ge=0, description="optimizer steps the stem's bias trains before it is frozen (3 epochs)")
    lookahead_every: int | None = Field(default=None, gt=0, description="lookahead period in steps (5)")
    lookahead_total_steps: int | None = Field(default=None, gt=0, description="the run's length, for the EMA ramp")
    tta_level: int = Field(default=0, ge=0, le=2, description="eval: 0 none, 1 mirror, 2 mirror + translate")

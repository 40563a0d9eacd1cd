"""The pydantic `Config` of data set reader cifar10.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/vision/cifar10.py loads with this very
class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder holding cifar-10-batches-py/ (or the batches)")
    train_limit: int | None = Field(default=None, gt=0)
    val_limit: int | None = Field(default=None, gt=0)
    flip: bool = Field(default=False, description="airbench94's alternating flip (random in epoch 0, then all "
                       "images mirrored every other epoch)")
    translate: int = Field(default=0, ge=0, le=8, description="random translation by up to N pixels "
                           "(reflect-padded crops), drawn per image per epoch")

"""The pydantic `Config` of data set reader fashion_mnist.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/vision/fashion_mnist.py loads with this very
class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder with the four *-ubyte.gz files")
    train_limit: int | None = Field(default=None, gt=0, description="use the first N training images (tiny runs)")
    val_limit: int | None = Field(default=None, gt=0, description="use the first N test images (tiny runs)")

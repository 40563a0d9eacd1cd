"""The pydantic `Config` of data set reader digits.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/vision/digits.py loads with this very class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    val_size: int = Field(default=360, gt=0, lt=1797)

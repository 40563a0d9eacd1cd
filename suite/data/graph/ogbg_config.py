"""The pydantic `Config` of data set reader ogbg.py, apart from the reader: what spec validation reads without importing
numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/graph/ogbg.py loads with this very class.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="the ogbg_molpcba/ folder (holding raw/ and split/)")
    split: str = "scaffold"
    val_split: Literal["valid", "test"] = "valid"
    train_limit: int | None = Field(default=None, gt=0)
    val_limit: int | None = Field(default=None, gt=0)

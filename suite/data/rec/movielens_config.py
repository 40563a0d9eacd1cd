"""The pydantic `Config` of data set reader movielens.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/rec/movielens.py loads with this very class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder holding ml-100k.inter, ml-100k.user, ml-100k.item")
    n_windows: int = Field(default=10, ge=2, description="equal-count temporal windows; the last is evaluated")
    positive_rating: float = Field(default=4.0, description="a rating at or above it is a positive (label 1)")
    max_history: int = Field(default=50, ge=1, description="previous interactions of the user kept per sample")
    limit: int | None = Field(default=None, gt=0, description="keep only the first N interactions in time (tiny)")

"""The pydantic `Config` of data set reader yambda.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/rec/yambda.py loads with this very class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder holding the processed Yambda files")
    max_history: int = Field(default=4096, ge=1, description="previous events of the user kept per sample")
    limit: int | None = Field(default=None, gt=0, description="keep only the first N training anchors in time")
    cross_rows: int | None = Field(default=None, gt=0, description="rows of every hashed cross table (the hash's "
                                   "modulus); default: the reference's per-table sizes (yambda_cross.CROSS_SPECS)")

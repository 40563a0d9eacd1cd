"""The pydantic `Config` of data set reader solubility.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/graph/solubility.py loads with this very
class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder with solubility.train.sdf and solubility.test.sdf")
    label_field: str = "SOL_classification"
    train_limit: int | None = Field(default=None, gt=0)
    val_limit: int | None = Field(default=None, gt=0)

"""The pydantic `Config` of data set reader drosophila.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/graph/drosophila.py loads with this very
class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder with left_adjacency.csv and left_cell_labels.csv")
    val_fraction: float = Field(default=0.3, gt=0, lt=1)
    features: str = Field(default="adjacency", pattern="^(adjacency|identity)$")

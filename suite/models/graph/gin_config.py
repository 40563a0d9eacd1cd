"""The pydantic `Config` of the GIN, apart from the model: what spec validation reads without importing torch
(suite/registry.py MODEL_CONFIGS). suite/models/graph/gin.py builds from this very class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n_layer: int = Field(default=3, gt=0)
    d_model: int = Field(default=64, gt=0)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    pool: str = Field(default="mean", pattern="^(mean|sum)$")
    virtual_node: bool = Field(default=False, description="OGB's gin-virtual: a node joined to every node of its "
                               "graph, updated by an MLP between layers (ogb examples/graphproppred/mol/conv.py)")

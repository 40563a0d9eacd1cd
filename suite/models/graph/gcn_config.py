"""The pydantic `Config` of the GCN, apart from the model: what spec validation reads without importing torch
(suite/registry.py MODEL_CONFIGS). suite/models/graph/gcn.py builds from this very class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hidden: list[int] = Field(default=[64], description="widths of the hidden GCN layers")
    dropout: float = Field(default=0.5, ge=0, lt=1)

"""The pydantic `Config` of DLRM-DCNv2 (with its presets), apart from the model: what spec validation reads without
importing torch (suite/registry.py MODEL_CONFIGS). suite/models/recsys/dcnv2.py builds from this very class.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from suite.models.common.configs import under_preset

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"embedding_dim": 4, "bottom_mlp": [8, 4], "top_mlp": [8, 1], "cross_layers": 1, "low_rank": 4},
    "cpu": {"embedding_dim": 16, "bottom_mlp": [64, 16], "top_mlp": [128, 64, 1], "cross_layers": 3, "low_rank": 32},
    "full": {"embedding_dim": 128, "bottom_mlp": [512, 256, 128], "top_mlp": [1024, 1024, 512, 256, 1],
             "cross_layers": 3, "low_rank": 512},
}


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    preset: Literal["tiny", "cpu", "full"] | None = Field(default=None, description="sizes; a field set wins")
    embedding_dim: int = Field(gt=0)
    bottom_mlp: list[int] = Field(min_length=1, description="dense arch widths; the last equals embedding_dim")
    top_mlp: list[int] = Field(min_length=1, description="over arch widths; the last is 1 (the logit)")
    cross_layers: int = Field(ge=1)
    low_rank: int = Field(gt=0)

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        return under_preset(data, PRESETS)

    @model_validator(mode="after")
    def _shapes(self) -> Config:
        if self.bottom_mlp[-1] != self.embedding_dim:
            raise ValueError(f"bottom_mlp ends in {self.bottom_mlp[-1]}, not embedding_dim {self.embedding_dim}")
        if self.top_mlp[-1] != 1:
            raise ValueError(f"top_mlp must end in 1 (the logit), not {self.top_mlp[-1]}")
        return self

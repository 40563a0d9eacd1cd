"""The pydantic `Config` of the GPT decoder, apart from the model: what spec validation reads without importing torch
(suite/registry.py MODEL_CONFIGS). suite/models/gpt/model.py builds from this very class.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n_layer: int = Field(gt=0)
    n_head: int = Field(gt=0)
    d_model: int = Field(gt=0)
    seq_len: int = Field(gt=0, description="context length (tokens per sample)")
    vocab_size: int | None = Field(default=None, gt=0, description="default: the data set's vocabulary")
    mlp_ratio: int = Field(default=4, gt=0)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    bias: bool = False
    tie_embeddings: bool = True
    gelu: Literal["exact", "tanh"] = Field(default="exact", description="tanh: GPT-2's (and llm.c's) approximation")

    @model_validator(mode="after")
    def _heads_divide(self) -> Config:
        if self.d_model % self.n_head:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_head {self.n_head}")
        return self

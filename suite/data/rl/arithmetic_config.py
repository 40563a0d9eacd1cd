"""The pydantic `Config` of data set reader arithmetic.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/rl/arithmetic.py loads with this very class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    digits: int = Field(default=3, ge=1, le=9, description="digits of each operand (zero-padded)")
    eval_problems: int = Field(default=128, gt=0, description="held-out problems each evaluation solves")
    eval_seed: int = Field(default=20261206, description="draws the held-out problems (fixed for every run)")
    reverse_answer: bool = Field(default=False, description="write the sum's digits least significant first")

"""The pydantic `Config` of data set reader govreport.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/text/govreport.py loads with this very
class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder with the two parquet files")
    vocab_size: int = Field(default=32000, gt=0, description="Llama 2's tokenizer")
    seq_len: int = Field(default=8192, gt=0, description="the packed rows' length (the reference's max_seq_len)")
    max_train_samples: int | None = Field(default=None, gt=0)
    max_val_samples: int | None = Field(default=None, gt=0)

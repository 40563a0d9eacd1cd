"""The pydantic `Config` of data set reader megatron_indexed.py, apart from the reader: what spec validation reads
without importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/text/megatron_indexed.py loads with
this very class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder with the .bin/.idx pairs (default: "
                             "$TRAINBENCH_DATA/megatron_indexed, linked by `trainbench data prepare`)")
    train_glob: str = Field(default="*train*_text_document.idx", description="train prefixes, by their .idx")
    val_glob: str = Field(default="*validation*_text_document.idx", description="validation prefixes")
    vocab_size: int = Field(default=128256, gt=0, description="the tokenizer's (Llama 3: 128256)")
    max_train_files: int | None = Field(default=None, gt=0)

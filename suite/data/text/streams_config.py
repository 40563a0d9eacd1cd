"""The pydantic Configs of the text streams (pydoc_topics, austen, fineweb10B), apart from the readers: what spec
validation reads without importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/text/streams.py
loads with these very classes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class CharConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    val_fraction: float = Field(default=0.1, gt=0, lt=0.5)
    limit_chars: int | None = Field(default=None, gt=0, description="use only the first N characters (tiny runs)")


class AustenConfig(CharConfig):
    path: str | None = Field(default=None, description="the package's data/ folder (Rdata.rdb and Rdata.rdx)")


class ShardConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder with the .bin shards")
    format: Literal["modded", "nanogpt"] = Field(
        default="modded", description="modded: 1024-byte header (magic 20240520); nanogpt: raw uint16")
    train_glob: str = "fineweb_train_*.bin"
    val_glob: str = "fineweb_val_*.bin"
    vocab_size: int = Field(default=50257, gt=0, description="GPT-2's tokenizer")
    max_train_shards: int | None = Field(default=None, gt=0)
    order: Literal["random_windows", "epochs"] = Field(
        default="random_windows", description="random_windows: windows drawn uniformly with replacement "
        "(nanoGPT's get_batch); epochs: llm.c's loader, every non-overlapping window once per epoch, shards and "
        "windows in a fresh seeded permutation each epoch (no replacement)")

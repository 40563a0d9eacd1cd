"""The pydantic `Config` of data set reader lora_text.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/text/lora_text.py loads with this very
class.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class BaseRecipe(BaseModel):
    """How the base is made: tokenizer size and the pretraining run (AdamW, cosine to 10%, seed 0)."""

    model_config = ConfigDict(extra="forbid")
    vocab_size: int = Field(default=512, ge=260, description="BPE vocabulary (byte alphabet + merges + 2 specials)")
    n_layer: int = Field(default=2, gt=0)
    d_model: int = Field(default=96, gt=0)
    n_head: int = Field(default=4, gt=0)
    n_kv_head: int = Field(default=2, gt=0)
    ffn_dim: int = Field(default=256, gt=0)
    seq_len: int = Field(default=64, gt=0)
    batch_size: int = Field(default=32, gt=0)
    steps: int = Field(default=600, gt=0)
    lr: float = Field(default=3e-3, gt=0)
    limit_chars: int | None = Field(default=None, gt=0, description="pretrain on the first N characters only")

    def model_fields_for_llama(self) -> dict[str, Any]:
        return {"n_layer": self.n_layer, "d_model": self.d_model, "n_head": self.n_head,
                "n_kv_head": self.n_kv_head, "ffn_dim": self.ffn_dim, "seq_len": self.seq_len,
                "vocab_size": self.vocab_size, "rope_theta": 10000.0}


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: Literal["pydoc_topics"] = Field(default="pydoc_topics", description="the text the base is fine-tuned on")
    val_fraction: float = Field(default=0.1, gt=0, lt=0.5)
    limit_chars: int | None = Field(default=None, gt=0, description="fine-tune text: the first N characters only")
    base: BaseRecipe = BaseRecipe()
    path: str | None = Field(default=None, description="the Austen data folder (as data.path of `austen`)")

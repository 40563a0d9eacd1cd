"""The pydantic `Config` of data set reader flux_latents.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/diffusion/flux_latents.py loads with this
very class.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder holding the three below (default: $TRAINBENCH_DATA/flux1)")
    train_dir: str = "cc12m_preprocessed"
    val_dir: str = "coco_preprocessed"
    empty_dir: str = "empty_encodings"
    latent_shape: list[int] = Field(default=[16, 32, 32], description="VAE latent of a 256x256 image (16 channels, /8)")
    t5_shape: list[int] = Field(default=[256, 4096], description="T5-XXL tokens x width (max_t5_encoding_len 256)")
    clip_dim: int = Field(default=768, gt=0, description="CLIP ViT-L pooled width (vec_in_dim)")
    autoencoder_shift: float = 0.1159  # the reference's [encoder] autoencoder_shift / autoencoder_scale
    autoencoder_scale: float = 0.3611
    caption_dropout: float = Field(default=0.1, ge=0, lt=1, description="classifer_free_guidance_prob")

    def describe(self) -> dict[str, Any]:
        """What the task needs to know before any file is read (suite/workloads/diffusion.py: check_spec)."""
        return {"latent_shape": tuple(self.latent_shape),
                "conditioning": {"text": {"context_dim": self.t5_shape[1], "vec_dim": self.clip_dim,
                                          "tokens": self.t5_shape[0]}}}

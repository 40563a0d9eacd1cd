"""The pydantic `Config` of data set reader imagenet.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/vision/imagenet.py loads with this very
class.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DALI_INSTALL = "pip install 'trainbench-suite[dali]' (nvidia-dali-cuda120: NVIDIA DALI for CUDA 12)"


def dali_missing() -> str | None:
    """Why NVIDIA DALI cannot be used here (None when it and its torch plug-in import)."""
    try:
        import nvidia.dali  # noqa: F401
        import nvidia.dali.plugin.pytorch  # noqa: F401
    except Exception as e:  # noqa: BLE001 - ImportError, or a broken install (CUDA libraries) raising anything
        return f"NVIDIA DALI does not import ({type(e).__name__}: {e}); install it: {DALI_INSTALL}"
    return None


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="ImageFolder root holding train/ and val/")
    image_size: int = Field(default=224, gt=0)
    eval_resize: int | None = Field(default=None, gt=0, description="short side before the centre crop (256)")
    min_crop_scale: float = Field(default=0.08, gt=0, le=1, description="RandomResizedCrop's lower scale")
    num_workers: int = Field(default=0, ge=0, description="DataLoader worker processes per rank")
    decode: Literal["auto", "dali", "pillow", "torchvision"] = Field(
        default="auto", description="pillow: decode and augment in the DataLoader workers (CPU); torchvision: the "
        "workers read bytes, the device decodes (nvJPEG) and augments; dali: one NVIDIA DALI pipeline per rank "
        "(nvJPEG on CUDA, DALI's CPU backend elsewhere; the 'dali' extra); auto: DALI on CUDA when it imports, "
        "else torchvision on CUDA when installed, else pillow")
    train_limit: int | None = Field(default=None, gt=0)
    val_limit: int | None = Field(default=None, gt=0)

    @field_validator("decode")
    @classmethod
    def _dali_installed(cls, v: str) -> str:
        if v == "dali" and (reason := dali_missing()):
            raise ValueError(f"dali: {reason}, or choose another data.decode (auto, torchvision, pillow)")
        return v

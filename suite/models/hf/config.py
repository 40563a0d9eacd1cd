"""`arch: hf_llama`'s pydantic `Config` (the Llama shape, the checkpoint folder, dtype, LoRA), apart from the
loader: what a spec check reads without importing torch. suite/models/hf/pretrained.py re-exports it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from suite.models.common import configs as lora_mod
from suite.models.llama import config as llama


class Config(llama.Config):
    checkpoint: str | None = Field(default=None, description=(
        "Hugging Face model folder (config.json + *.safetensors); relative paths are under TRAINBENCH_DATA; "
        "`data`: the one the data set provides (lora_text's pretrained base). None: random weights of the declared "
        "shape (shape checks only, never a fine-tune)"))
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        default=None, description="cast the weights to this dtype on load (default: the checkpoint's)")
    lora: lora_mod.LoraConfig | None = Field(default=None, description="LoRA adapters; the base is then frozen")

"""The pydantic `Config` of the Flux diffusion transformer (with its presets), apart from the model: what spec
validation reads without importing torch (suite/registry.py MODEL_CONFIGS). suite/models/flux/model.py builds from
this very class.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from suite.models.common.configs import under_preset

PRESETS: dict[str, dict[str, Any]] = {
    # FLUX.1-schnell as the MLPerf reference trains it (torchtitan flux_schnell flavor; README "List of layers")
    "flux-schnell": {"hidden_size": 3072, "num_heads": 24, "depth": 19, "depth_single_blocks": 38, "mlp_ratio": 4.0,
                     "axes_dim": [16, 56, 56], "theta": 10_000, "qkv_bias": True, "patch_size": 2,
                     "context_in_dim": 4096, "vec_in_dim": 768},
    # a CPU shape with every kind of block (torchtitan's flux-debug is 2+2 blocks of 3072; this is narrower)
    "flux-tiny": {"hidden_size": 64, "num_heads": 4, "depth": 1, "depth_single_blocks": 1, "mlp_ratio": 2.0,
                  "axes_dim": [4, 6, 6], "theta": 10_000, "qkv_bias": True, "patch_size": 2},
}


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    preset: Literal["flux-schnell", "flux-tiny"] | None = Field(default=None, description="a named shape")
    hidden_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    depth: int = Field(ge=0, description="double-stream (joint text/image attention) blocks")
    depth_single_blocks: int = Field(ge=0, description="single-stream blocks")
    mlp_ratio: float = Field(default=4.0, gt=0)
    axes_dim: list[int] = Field(description="rotary dimensions per position axis (0, row, column); sum = head dim")
    theta: int = Field(default=10_000, gt=0)
    qkv_bias: bool = True
    patch_size: int = Field(default=2, gt=0, description="latent pixels per token side")
    context_in_dim: int | None = Field(default=None, gt=0, description="text token width; default: the data's")
    vec_in_dim: int | None = Field(default=None, gt=0, description="pooled vector width; default: the data's")
    conditioning: Literal["label", "text", "none"] = Field(
        default="label", description="label: one-hot class as one text token and the pooled vector; text: the "
        "data set's text embeddings (T5 tokens, CLIP pooled); none: unconditional")
    timestep_sampling: Literal["uniform", "logit_normal"] = Field(
        default="uniform", description="training timesteps: uniform in [0, 1) (the MLPerf flux1 reference: "
        "torch.rand) or logit-normal (SD3, Esser et al. 2024)")
    logit_mean: float = 0.0
    logit_std: float = Field(default=1.0, gt=0)
    eval_timesteps: int = Field(default=8, gt=0, description="validation at t = i / n, i = 0..n-1 (MLPerf: 8)")
    eval_noise_seed: int = Field(default=0, ge=0, description="validation noise: fixed, so the loss is deterministic")

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        return under_preset(data, PRESETS)

    @model_validator(mode="after")
    def _shapes(self) -> Config:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"num_heads ({self.num_heads}) does not divide hidden_size ({self.hidden_size})")
        if sum(self.axes_dim) != self.head_dim or any(d % 2 for d in self.axes_dim):
            raise ValueError(f"axes_dim {self.axes_dim} must be even and sum to the head dim {self.head_dim}")
        return self

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def mlp_hidden(self) -> int:
        return int(self.hidden_size * self.mlp_ratio)

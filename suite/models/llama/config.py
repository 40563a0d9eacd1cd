"""The Llama decoder's pydantic `Config` (sizes, presets, MoE, rotary scaling), apart from the model: what a spec
check reads without importing torch (`suite/backends/*` `supports`). suite/models/llama/model.py re-exports it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from suite.models.common.configs import MoEConfig, RopeScaling
from suite.models.llama import presets as llm_presets


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    preset: str | None = Field(default=None, description=f"named shape: {', '.join(llm_presets.PRESETS)}")
    n_layer: int = Field(gt=0)
    d_model: int = Field(gt=0)
    n_head: int = Field(gt=0, description="query heads")
    n_kv_head: int | None = Field(default=None, gt=0, description="key/value heads (GQA); default n_head")
    head_dim: int | None = Field(default=None, gt=0, description="default d_model / n_head")
    ffn_dim: int = Field(gt=0, description="SwiGLU hidden width of a dense layer")
    seq_len: int = Field(gt=0, description="context length (tokens per sample)")
    vocab_size: int | None = Field(default=None, gt=0, description="default: the data set's vocabulary")
    rope_theta: float = Field(default=500000.0, gt=0)
    rope_scaling: RopeScaling | None = Field(default=None, description="Llama 3.1's (rope_type llama3)")
    norm_eps: float = Field(default=1e-5, gt=0)
    attention_bias: bool = False
    qkv_bias: bool = Field(default=False, description="biases on the q, k and v projections only, not o "
                           "(Qwen2); attention_bias puts one on all four")
    tie_embeddings: bool = False
    qk_norm: bool = Field(default=False, description="an RMSNorm over each head's query and key before rotary "
                          "(Qwen3's q_norm / k_norm, Megatron's qk_layernorm), one weight of head_dim each")
    fused_qkv: bool = Field(default=False, description=(
        "q, k and v as ONE linear `wqkv` (rows [q; k; v], the layout of MLPerf's fused qkv_proj checkpoint), its "
        "output split: LoRA's qkv_proj is then one adapter over the fused layer, as in MLPerf's reference"))
    init_std: float = Field(default=0.02, gt=0)
    moe: MoEConfig | None = Field(default=None, description="Mixture-of-Experts feed-forward layers")
    dense_layers: int = Field(default=0, ge=0, description="with moe: the first layers that stay dense")

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        return llm_presets.expand(data)

    @model_validator(mode="after")
    def _shapes(self) -> Config:
        if self.head_dim is None and self.d_model % self.n_head:
            raise ValueError(f"n_head ({self.n_head}) does not divide d_model ({self.d_model}): choose n_head "
                             "dividing d_model, or set head_dim")
        if self.n_head % self.kv_heads:
            raise ValueError(f"n_kv_head ({self.n_kv_head}) does not divide n_head ({self.n_head}): each key/value "
                             "head serves a whole group of query heads; choose a divisor of n_head")
        if self.head_size % 2:
            raise ValueError(f"head_dim ({self.head_size}) is odd: rotary embeddings rotate pairs of dimensions")
        if self.dense_layers and self.moe is None:
            raise ValueError("dense_layers is set without moe: it counts the dense layers before the MoE ones")
        if self.moe is not None and self.dense_layers >= self.n_layer:
            raise ValueError(f"dense_layers ({self.dense_layers}) leaves no MoE layer of n_layer ({self.n_layer})")
        return self

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def head_size(self) -> int:
        return self.head_dim or self.d_model // self.n_head

    def is_moe(self, layer: int) -> bool:
        return self.moe is not None and layer >= self.dense_layers

    @property
    def qkv_sizes(self) -> tuple[int, int, int]:
        """Output widths of q, k and v: the rows of each in a fused [q; k; v] matrix."""
        kv = self.kv_heads * self.head_size
        return self.n_head * self.head_size, kv, kv

"""The pydantic configs of the shared layers (rotary scaling, the MoE block, LoRA adapters), apart from the layers:
a spec check (`trainbench list --json`, a backend's `supports`) reads them without importing torch. The layers'
modules (`layers`, `moe`, `lora`) re-export them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


def under_preset(data: Any, presets: Mapping[str, Mapping[str, Any]]) -> Any:
    """A Config's raw fields (a `mode="before"` validator's input) with its named preset's sizes underneath them: a
    field given wins. Anything else is returned as it came, for the `preset` field's own type to refuse by name (an
    unknown name, or a list from `--set model.preset=[tiny]`, which must not reach a dict lookup: unhashable)."""
    if isinstance(data, dict) and isinstance(data.get("preset"), str) and data["preset"] in presets:
        return {**presets[data["preset"]], **data}
    return data


class RopeScaling(BaseModel):
    """Llama 3.1's `rope_scaling` (`rope_type: llama3` in its config.json): wavelengths longer than
    original_max_position_embeddings / low_freq_factor are stretched by `factor`, those shorter than
    original_max_position_embeddings / high_freq_factor are kept, and the band between is interpolated."""

    model_config = ConfigDict(extra="forbid")
    factor: float = Field(default=8.0, gt=0)
    low_freq_factor: float = Field(default=1.0, gt=0)
    high_freq_factor: float = Field(default=4.0, gt=0)
    original_max_position_embeddings: int = Field(default=8192, gt=0)

    @model_validator(mode="after")
    def _band(self) -> RopeScaling:
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(f"rope_scaling.high_freq_factor ({self.high_freq_factor}) must be larger than "
                             f"rope_scaling.low_freq_factor ({self.low_freq_factor}): they bound the smoothed band")
        return self


class MoEConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    experts: int = Field(gt=0, description="routed experts per MoE layer")
    top_k: int = Field(gt=0, description="experts each token is routed to")
    expert_ffn_dim: int = Field(gt=0, description="hidden width of one expert's SwiGLU")
    score: Literal["softmax", "sigmoid"] = "softmax"
    normalize_top_k: bool = Field(default=True, description="renormalise the chosen k scores to sum to 1")
    routed_scaling: float = Field(default=1.0, gt=0, description="DeepSeek-V3's routed_scaling_factor (2.5)")
    score_bias: bool = Field(default=False, description="a per-expert bias added to the scores for the choice only")
    groups: int = Field(default=1, gt=0, description="expert groups for group-limited routing (DeepSeek-V3: 8)")
    topk_groups: int = Field(default=1, gt=0, description="groups a token may use (DeepSeek-V3: 4)")
    shared_experts: int = Field(default=0, ge=0, description="always-on experts, run as one SwiGLU of their width")
    aux_loss_coeff: float = Field(default=0.01, ge=0, description=(
        "weight of the load-balancing loss (Switch form, Megatron's `moe_aux_loss_coeff`); 0.01 is MLPerf's "
        "deepseekv3_671b (mlperf_logging training_6.1.0/closed_deepseekv3_671b.yaml)"))

    @model_validator(mode="after")
    def _routable(self) -> MoEConfig:
        if self.top_k > self.experts:
            raise ValueError(f"moe.top_k ({self.top_k}) is larger than moe.experts ({self.experts}): a token cannot "
                             "be routed to more experts than exist; lower top_k or add experts")
        if self.experts % self.groups:
            raise ValueError(f"moe.groups ({self.groups}) does not divide moe.experts ({self.experts})")
        if self.topk_groups > self.groups:
            raise ValueError(f"moe.topk_groups ({self.topk_groups}) is larger than moe.groups ({self.groups})")
        if self.groups > 1 and self.experts // self.groups < 2:
            raise ValueError(f"moe.groups ({self.groups}): each group needs at least 2 experts (a group is "
                             "scored by its best two)")
        if self.top_k > self.topk_groups * (self.experts // self.groups):
            raise ValueError(f"moe.top_k ({self.top_k}) is larger than the experts in moe.topk_groups "
                             f"({self.topk_groups}) groups of {self.experts // self.groups}")
        return self


HF_TARGETS: dict[str, tuple[str, ...]] = {
    "q_proj": ("wq",), "k_proj": ("wk",), "v_proj": ("wv",), "o_proj": ("wo",), "qkv_proj": ("wq", "wk", "wv"),
    "gate_proj": ("w1",), "up_proj": ("w3",), "down_proj": ("w2",), "lm_head": ("output",),
    # Megatron-core's fused names: one adapter each under --backend megatron (suite/backends/megatron/lora.py), the
    # split projections' adapters here
    "linear_qkv": ("wq", "wk", "wv"), "linear_proj": ("wo",), "linear_fc1": ("w1", "w3"), "linear_fc2": ("w2",)}
SUITE_TARGETS = ("wq", "wk", "wv", "wo", "w1", "w2", "w3", "output")
FUSED_QKV = ("qkv_proj", "linear_qkv", "wqkv")  # with model.fused_qkv: the one linear wqkv


class LoraConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rank: int = Field(gt=0, description="r: the adapters' inner width (MLPerf closed: 16)")
    alpha: int = Field(gt=0, description="the update is scaled by alpha / rank (an integer, as peft types it)")
    dropout: float = Field(default=0.0, ge=0, lt=1, description="dropout on the adapter's input")
    target_modules: list[str] = Field(min_length=1, description=(
        "linear layers that get adapters: suite names (wq, wk, wv, wo, w1, w2, w3, output) or Hugging Face's "
        "(q_proj, ..., qkv_proj for wq+wk+wv, or the one wqkv with model.fused_qkv)"))

    def suite_targets(self, fused_qkv: bool = False) -> list[str]:
        """The suite's linear layers the targets name, each once; `fused_qkv`: the model's (model.fused_qkv)."""
        out: list[str] = []
        for name in self.target_modules:
            if fused_qkv and (name in FUSED_QKV or name in ("wq", "wk", "wv", "q_proj", "k_proj", "v_proj")):
                if name not in FUSED_QKV:
                    raise ValueError(f"lora.target_modules: {name!r} with model.fused_qkv: q, k and v are one linear "
                                     "(wqkv); target qkv_proj (one adapter over the fused output), or set "
                                     "model.fused_qkv: false for separate q/k/v adapters")
                if "wqkv" not in out:
                    out.append("wqkv")
                continue
            if name == "wqkv":
                raise ValueError("lora.target_modules: 'wqkv' exists only with model.fused_qkv: true; without it "
                                 "target qkv_proj (adapters on wq, wk and wv)")
            names = HF_TARGETS.get(name, (name,))
            for n in names:
                if n not in SUITE_TARGETS:
                    raise ValueError(f"lora.target_modules: {name!r} is not a linear layer of the Llama decoder; "
                                     f"known: {', '.join(SUITE_TARGETS)} or {', '.join(HF_TARGETS)}")
                if n not in out:
                    out.append(n)
        return out

"""Qwen3.5-MoE's text decoder, written here from transformers 5.10.4's modeling_qwen3_5_moe.py (its semantics,
not its code): the layer that `layer_types` (or `full_attention_interval`) makes a Gated DeltaNet layer or a gated
full-attention layer, each followed by a sparse MoE block with a gated shared expert.

- Gated DeltaNet (linear attention): in_proj_qkv -> depthwise causal conv1d (kernel 4, no bias) -> SiLU -> q, k, v;
  q and k L2-normalised (eps 1e-6) and repeated to the value heads (each key head serves consecutive value heads);
  beta = sigmoid(in_proj_b x), decay g = -exp(A_log) softplus(in_proj_a x + dt_bias); the gated delta rule run as
  its recurrence in float32 (S <- exp(g) S; S <- S + k (beta (v - S^T k))^T; o = S^T q / sqrt(d_k)): exact, slow,
  what transformers' torch_recurrent_gated_delta_rule computes (its chunked form is the same sum); then an RMSNorm
  over each value head with a plain weight (initialised to ones) times SiLU(in_proj_z x), and out_proj.
- Gated attention: q_proj gives each head's query and its output gate (interleaved per head: [q_h, gate_h]); per-head
  q/k RMSNorm; rotary on the first `partial_rotary_factor` (0.25: 64 of 256) of each head's dimensions, half-split
  (rotate_half) pairs; causal GQA softmax attention scaled by head_dim^-0.5; output times sigmoid(gate), o_proj.
  Text positions only: transformers' interleaved M-RoPE, given the same position for its three sections, is this.
- RMSNorms of the residual stream, q and k: zero-centred weights, x / rms(x) * (1 + w), in float32.
- MoE: softmax router over all experts in float32, top-k, the k weights renormalised to sum 1 (transformers always
  renormalises); routed SwiGLU experts; one shared SwiGLU expert scaled by sigmoid(shared_expert_gate x).

Left out: the multi-token-prediction head (transformers' Qwen3_5MoeForCausalLM has none either; checkpoints' mtp.*
weights are ignored), the vision tower, padding masks (every sequence is whole), KV/recurrent caches and the
router's load-balancing loss. tests/models/test_qwen35_transformers.py checks the logits against transformers
5.10.4's Qwen3_5MoeForCausalLM and the parameter counts against suite/models/qwen35/model.py.

May import what `suite.models` may.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.qwen35.model import QWEN35_397B


@dataclass(frozen=True)
class Config:
    """transformers' Qwen3_5MoeTextConfig fields, by their names there (model.py's QWEN35_397B is one)."""
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_num_value_heads: int
    linear_num_key_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    linear_conv_kernel_dim: int = 4
    full_attention_interval: int = 4
    layer_types: tuple[str, ...] = field(default=())
    tie_word_embeddings: bool = False
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.25

    def __post_init__(self) -> None:
        if not self.layer_types:
            k = self.full_attention_interval
            kinds = tuple("full_attention" if (i + 1) % k == 0 else "linear_attention"
                          for i in range(self.num_hidden_layers))
            object.__setattr__(self, "layer_types", kinds)
        if len(self.layer_types) != self.num_hidden_layers or set(self.layer_types) - {"linear_attention",
                                                                                          "full_attention"}:
            raise ValueError(f"layer_types {self.layer_types} is not {self.num_hidden_layers} of "
                             "linear_attention / full_attention")
        if self.linear_num_value_heads % self.linear_num_key_heads or self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("value heads must be a multiple of key heads (DeltaNet), query heads of KV heads")

    @classmethod
    def of(cls, c: Mapping[str, Any]) -> Config:
        """From a config.json-like dict: rope_parameters' theta and partial factor read; what would change the
        function (attention biases, another activation, another rotary type) refused; the rest ignored, as
        transformers' causal LM ignores the MTP head's num_nextn_predict_layers."""
        if c.get("attention_bias") or c.get("hidden_act", "silu") != "silu":
            raise ValueError("attention_bias or a hidden_act other than silu: not in this decoder")
        rope_type = (c.get("rope_parameters") or {}).get("rope_type", "default")
        if rope_type != "default":
            raise ValueError(f"rope_parameters.rope_type is {rope_type!r}: this decoder has the default rotary only")
        names = {f.name for f in fields(cls)}
        kw = {k: (tuple(v) if k == "layer_types" and v is not None else v) for k, v in c.items() if k in names}
        if kw.get("layer_types") is None:
            kw.pop("layer_types", None)
        rope = c.get("rope_parameters") or {}
        for k in ("rope_theta", "partial_rotary_factor"):
            if k in rope:
                kw[k] = rope[k]
        return cls(**kw)


class RMSNorm(nn.Module):
    """x / rms(x) * (1 + w) in float32, w initialised to 0 (the residual stream's and q/k norms)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).to(x.dtype)


class GatedRMSNorm(nn.Module):
    """DeltaNet's output norm: x / rms(x) * w (w initialised to 1; not zero-centred), times SiLU(gate)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
        return (self.weight * h * F.silu(gate.float())).to(x.dtype)


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                     beta: torch.Tensor) -> torch.Tensor:
    """The gated delta rule's recurrence over [B, T, H, d] q/k (already L2-normalised), v [B, T, H, dv], log-decay
    g and write strength beta [B, T, H]; float32 state S [B, H, d, dv] from zero. Returns [B, T, H, dv]."""
    dtype = v.dtype
    q, k, v, g, beta = (t.float() for t in (q, k, v, g, beta))
    q = q * q.shape[-1] ** -0.5
    b, n, h, dk = k.shape
    state = q.new_zeros(b, h, dk, v.shape[-1])
    out = []
    for t in range(n):
        state = state * g[:, t].exp()[..., None, None]
        kt = k[:, t]
        recalled = torch.einsum("bhkv,bhk->bhv", state, kt)
        delta = (v[:, t] - recalled) * beta[:, t, :, None]
        state = state + kt[..., :, None] * delta[..., None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
    return torch.stack(out, dim=1).to(dtype)


class GatedDeltaNet(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.hk, self.hv = c.linear_num_key_heads, c.linear_num_value_heads
        self.dk, self.dv = c.linear_key_head_dim, c.linear_value_head_dim
        self.key_dim, self.value_dim = self.hk * self.dk, self.hv * self.dv
        conv_dim = 2 * self.key_dim + self.value_dim
        self.kernel = c.linear_conv_kernel_dim
        self.in_proj_qkv = nn.Linear(c.hidden_size, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(c.hidden_size, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(c.hidden_size, self.hv, bias=False)
        self.in_proj_a = nn.Linear(c.hidden_size, self.hv, bias=False)
        self.conv_weight = nn.Parameter(torch.empty(conv_dim, 1, self.kernel))  # depthwise, no bias
        nn.init.kaiming_uniform_(self.conv_weight, a=math.sqrt(5))
        self.dt_bias = nn.Parameter(torch.ones(self.hv))
        self.A_log = nn.Parameter(torch.empty(self.hv).uniform_(1e-3, 16).log())
        self.norm = GatedRMSNorm(self.dv, c.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        mixed = self.in_proj_qkv(x).transpose(1, 2)                       # [B, C, T]
        mixed = F.conv1d(F.pad(mixed, (self.kernel - 1, 0)), self.conv_weight.to(mixed.dtype),
                         groups=mixed.shape[1])                             # causal: left padding only
        mixed = F.silu(mixed).transpose(1, 2)
        q, k, v = mixed.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q, k = q.reshape(b, n, self.hk, self.dk), k.reshape(b, n, self.hk, self.dk)
        v = v.reshape(b, n, self.hv, self.dv)
        beta = torch.sigmoid(self.in_proj_b(x))
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias)
        if self.hv != self.hk:
            q = q.repeat_interleave(self.hv // self.hk, dim=2)
            k = k.repeat_interleave(self.hv // self.hk, dim=2)
        o = gated_delta_rule(_l2norm(q.float()), _l2norm(k.float()), v, g, beta)
        z = self.in_proj_z(x).reshape(b, n, self.hv, self.dv)
        return self.out_proj(self.norm(o, z).reshape(b, n, self.value_dim))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class GatedAttention(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.h, self.kv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, 2 * self.h * self.hd, bias=False)  # query and output gate
        self.k_proj = nn.Linear(c.hidden_size, self.kv * self.hd, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, self.kv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.h * self.hd, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.hd, c.rms_norm_eps)
        self.k_norm = RMSNorm(self.hd, c.rms_norm_eps)
        self.rot = int(self.hd * c.partial_rotary_factor)
        self.theta = c.rope_theta

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # x [B, H, T, hd]; rotary on the first `rot` dims (half-split pairs), the rest passed through
        inv = 1.0 / self.theta ** (torch.arange(0, self.rot, 2, device=x.device, dtype=torch.int64).float() / self.rot)
        ang = pos.float()[:, None] * inv[None, :]
        ang = torch.cat((ang, ang), dim=-1)
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        r, rest = x[..., :self.rot], x[..., self.rot:]
        return torch.cat((r * cos + _rotate_half(r) * sin, rest), dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        qg = self.q_proj(x).view(b, n, self.h, 2 * self.hd)
        q, gate = qg[..., :self.hd], qg[..., self.hd:].reshape(b, n, self.h * self.hd)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, n, self.kv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv, self.hd).transpose(1, 2)
        pos = torch.arange(n, device=x.device)
        q, k = self._rope(q, pos), self._rope(k, pos)
        if self.kv != self.h:  # KV head j serves query heads j*r .. j*r + r - 1
            k = k.repeat_interleave(self.h // self.kv, dim=1)
            v = v.repeat_interleave(self.h // self.kv, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.hd ** -0.5)
        o = o.transpose(1, 2).reshape(b, n, self.h * self.hd)
        return self.o_proj(o * torch.sigmoid(gate))


class SwiGLU(nn.Module):
    def __init__(self, d: int, ffn: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, ffn, bias=False)
        self.up_proj = nn.Linear(d, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoE(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.top_k, d, e, f = c.num_experts_per_tok, c.hidden_size, c.num_experts, c.moe_intermediate_size
        self.router = nn.Parameter(torch.randn(e, d) * 0.02)
        self.w_gate_up = nn.Parameter(torch.randn(e, 2 * f, d) * 0.02)  # [gate; up] rows per expert
        self.w_down = nn.Parameter(torch.randn(e, d, f) * 0.02)
        self.shared = SwiGLU(d, c.shared_expert_intermediate_size)
        self.shared_gate = nn.Linear(d, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = torch.softmax(F.linear(x, self.router).float(), dim=-1)
        weight, idx = probs.topk(self.top_k, dim=-1)
        weight = (weight / weight.sum(-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(x)
        for e in idx.unique().tolist():
            tok, slot = (idx == e).nonzero(as_tuple=True)
            gate, up = F.linear(x[tok], self.w_gate_up[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.w_down[e]) * weight[tok, slot, None]
            out.index_add_(0, tok, y)
        out = out + torch.sigmoid(self.shared_gate(x)) * self.shared(x)
        return out.reshape(shape)


class Layer(nn.Module):
    def __init__(self, c: Config, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.norm1 = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mixer = GatedDeltaNet(c) if kind == "linear_attention" else GatedAttention(c)
        self.norm2 = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.moe = SparseMoE(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mixer(self.norm1(x))
        return x + self.moe(self.norm2(x))


class Qwen35MoE(nn.Module):
    """Token ids [B, T] -> logits [B, T, vocab]."""

    def __init__(self, c: Config) -> None:
        super().__init__()
        self.config = c
        self.embed = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(Layer(c, kind) for kind in c.layer_types)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if c.tie_word_embeddings:
            self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))

    def param_count(self, active: bool = False) -> int:
        """Every parameter; `active`: the routed experts counted top_k of num_experts (what one token uses)."""
        c = self.config
        total = sum(p.numel() for p in self.parameters())
        if not active:
            return total
        routed = sum(m.w_gate_up.numel() + m.w_down.numel() for m in self.modules() if isinstance(m, SparseMoE))
        return total - routed + routed // c.num_experts * c.num_experts_per_tok


# the family's presets as this decoder builds them: the 397B is model.py's shape; the tiny one is the family's
# `qwen3.5-moe-tiny` (width 64, 4 Q / 1 KV heads of 32, 16 experts top-4 of 32, vocabulary 256) at 4 layers so that
# it has the 3 DeltaNet + 1 attention pattern (DeltaNet 4 V / 2 K heads of 16). The workload rl/qwen35_397b_grpo
# still builds its policy from the family preset on the generic MoE decoder (suite/models/qwen35/__init__.py says why).
PRESETS: dict[str, dict[str, Any]] = {
    "qwen3.5-397b-a17b": QWEN35_397B,
    "qwen3.5-moe-tiny": {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 4, "full_attention_interval": 4,
                         "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
                         "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16,
                         "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "num_experts": 16,
                         "num_experts_per_tok": 4, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
                         "tie_word_embeddings": False},
}


def build(preset: str) -> Qwen35MoE:
    """The decoder of a preset by name (PRESETS)."""
    if preset not in PRESETS:
        raise KeyError(f"no Qwen3.5-MoE decoder preset {preset!r} (presets: {', '.join(PRESETS)})")
    return Qwen35MoE(Config.of(PRESETS[preset]))


# transformers' Qwen3_5MoeForCausalLM parameter names -> this module's (per layer, after `model.layers.{i}.`)
_LAYER_NAMES = {
    "input_layernorm.weight": "norm1.weight",
    "post_attention_layernorm.weight": "norm2.weight",
    "linear_attn.in_proj_qkv.weight": "mixer.in_proj_qkv.weight",
    "linear_attn.in_proj_z.weight": "mixer.in_proj_z.weight",
    "linear_attn.in_proj_b.weight": "mixer.in_proj_b.weight",
    "linear_attn.in_proj_a.weight": "mixer.in_proj_a.weight",
    "linear_attn.conv1d.weight": "mixer.conv_weight",
    "linear_attn.dt_bias": "mixer.dt_bias",
    "linear_attn.A_log": "mixer.A_log",
    "linear_attn.norm.weight": "mixer.norm.weight",
    "linear_attn.out_proj.weight": "mixer.out_proj.weight",
    **{f"self_attn.{p}.weight": f"mixer.{p}.weight" for p in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm",
                                                             "k_norm")},
    "mlp.gate.weight": "moe.router",
    "mlp.experts.gate_up_proj": "moe.w_gate_up",
    "mlp.experts.down_proj": "moe.w_down",
    **{f"mlp.shared_expert.{p}.weight": f"moe.shared.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")},
    "mlp.shared_expert_gate.weight": "moe.shared_gate.weight",
}
_TOP_NAMES = {"model.embed_tokens.weight": "embed.weight", "model.norm.weight": "norm.weight",
              "lm_head.weight": "head.weight"}


def suite_name(hf: str) -> str | None:
    """The suite parameter a transformers Qwen3_5MoeForCausalLM parameter is; None for those left out (mtp.*)."""
    if hf in _TOP_NAMES:
        return _TOP_NAMES[hf]
    parts = hf.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in _LAYER_NAMES:
        return f"layers.{parts[2]}.{_LAYER_NAMES[parts[3]]}"
    return None


def load_hf_state_dict(model: Qwen35MoE, state: Mapping[str, torch.Tensor]) -> None:
    """Copy a transformers Qwen3_5MoeForCausalLM state dict into `model`: every suite parameter must be given,
    every given tensor placed (but mtp.*, which the suite leaves out), shapes equal."""
    own = dict(model.named_parameters())
    mapped = {}
    for k, v in state.items():
        name = suite_name(k)
        if name is None:
            if k.startswith("mtp."):
                continue
            raise KeyError(f"{k}: not a parameter of the suite's Qwen3.5-MoE decoder")
        if name not in own or own[name].shape != v.shape:
            raise KeyError(f"{k} -> {name}: {tuple(v.shape)} does not fit "
                           f"{tuple(own[name].shape) if name in own else 'no such parameter'}")
        mapped[name] = v
    missing = set(own) - set(mapped) - ({"head.weight"} if model.config.tie_word_embeddings else set())
    if missing:
        raise KeyError(f"not in the state dict: {sorted(missing)}")
    with torch.no_grad():
        for name, v in mapped.items():
            own[name].copy_(v)

"""Layers the Llama-class decoder and its Mixture-of-Experts share: RMSNorm, the SwiGLU MLP, rotary embeddings
with Llama 3.1's frequency scaling.

Rotary embeddings rotate the two halves of each head (`rotate_half`, GPT-NeoX's and Hugging Face's layout), not
interleaved pairs (Meta's reference, torchtitan): with this layout a Hugging Face checkpoint's q/k weights load
by name alone, without the row permutation torchtitan's state-dict adapter applies.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.common.configs import RopeScaling


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling | None = None) -> torch.Tensor:
    """Inverse frequencies theta^(-2i/d), i < d/2, scaled as Llama 3.1's `apply_scaling` does; in fp32, as Meta's
    reference and Hugging Face compute them (so the tables are bit-identical to theirs)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)
    if scaling is None:
        return inv_freq
    old_len = scaling.original_max_position_embeddings
    low_freq_wavelen = old_len / scaling.low_freq_factor  # longer than this: interpolated by `factor`
    high_freq_wavelen = old_len / scaling.high_freq_factor  # shorter than this: unchanged
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_len / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
    blended = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq
    return torch.where(wavelen < high_freq_wavelen, inv_freq,
                       torch.where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, blended))


class Rotary(nn.Module):
    """cos / sin tables for positions 0..seq_len-1, computed in fp32 (as Hugging Face does, also under autocast)
    and kept out of the state dict (a buffer derived from the config, like HF's `inv_freq`)."""

    inv_freq: torch.Tensor

    def __init__(self, head_dim: int, theta: float, scaling: RopeScaling | None):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"head_dim {head_dim} is odd: rotary embeddings rotate pairs of dimensions")
        self.register_buffer("inv_freq", rope_inv_freq(head_dim, theta, scaling), persistent=False)

    def forward(self, seq_len: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(seq_len, device=self.inv_freq.device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq.float())
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (batch, heads, seq, head_dim); cos, sin: (seq, head_dim)."""
    return x * cos + rotate_half(x) * sin


class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich 2019), computed in fp32 and cast back, then scaled."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


class SwiGLU(nn.Module):
    """w2(silu(w1 x) * w3 x) (Shazeer 2020); w1 is Hugging Face's gate_proj, w3 its up_proj, w2 its down_proj."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def swiglu_params(dim: int, hidden: int) -> int:
    return 3 * dim * hidden


class LayerCache:
    """One attention layer's key/value cache for generation (suite/models/common/generation.py): the rotated keys and
    the values of every position so far, (batch, kv_heads, length, head_dim), grown by concatenation."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else int(self.k.shape[2])

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k = k if self.k is None else torch.cat((self.k, k), dim=2)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=2)
        return self.k, self.v

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only these batch rows (finished sequences dropped)."""
        if self.k is not None and self.v is not None:
            self.k, self.v = self.k[rows], self.v[rows]

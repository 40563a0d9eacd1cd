"""`arch: flux`: a Flux-style diffusion transformer (Black Forest Labs' FLUX.1, as torchtitan's `flux` model builds it).

Patchified latents (`pack`: 2x2 patches of a C-channel latent become tokens of C*4 features), a sinusoidal timestep
embedding and a pooled conditioning vector summed into one vector that modulates every block (adaptive layer norm:
shift, scale and gate per sub-layer), `depth` double-stream blocks (image and text tokens keep their own weights
but attend jointly) and `depth_single_blocks` single-stream blocks (one sequence, attention and MLP in parallel),
rotary position embeddings over (0, row, column) ids, RMS-normed queries and keys. Parameter names follow
torchtitan's / BFL's, so a state dict moves between the two unchanged (tests/models/test_flux.py).

The flow objective this model is trained with (timestep sampling, the conditioning source) is configured here too
and run by suite/workloads/diffusion.py. Presets: `flux-schnell` is the MLPerf flux1 reference's model (11.9 B
parameters, text_to_image/README.md of mlcommons/training); `flux-tiny` is a CPU shape.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.measure.flops import TRAIN_MULTIPLIER, attention_flops, linear_flops
from suite.models.flux.config import Config
from suite.registry import Component

TIME_DIM = 256  # sinusoidal timestep features (FLUX: timestep_embedding(t, 256))


# ---- patches, positions, timesteps ---------------------------------------------------------------------------


def pack(latents: torch.Tensor, p: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, H/p * W/p, C*p*p): row-major patches, each (c, ph, pw) flattened (torchtitan pack_latents)."""
    b, c, h, w = latents.shape
    x = latents.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // p) * (w // p), c * p * p)


def unpack(tokens: torch.Tensor, h: int, w: int, p: int) -> torch.Tensor:
    b, _, d = tokens.shape
    c = d // (p * p)
    x = tokens.reshape(b, h // p, w // p, c, p, p).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c, h, w)


def image_ids(batch: int, h: int, w: int, p: int) -> torch.Tensor:
    """(B, h/p * w/p, 3) position ids (0, row, column) of the patches."""
    ids = torch.zeros(h // p, w // p, 3)
    ids[..., 1] = torch.arange(h // p)[:, None]
    ids[..., 2] = torch.arange(w // p)[None, :]
    return ids.reshape(1, -1, 3).expand(batch, -1, -1)


def timestep_embedding(t: torch.Tensor, dim: int = TIME_DIM, max_period: float = 10_000.0,
                       time_factor: float = 1000.0) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = (time_factor * t)[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1).to(t.dtype if t.is_floating_point() else args.dtype)


def rope(ids: torch.Tensor, axes_dim: list[int], theta: int) -> torch.Tensor:
    """(B, L, n_axes) ids -> (B, 1, L, head_dim/2, 2, 2) rotation matrices, one axis after the other."""
    parts = []
    for i, dim in enumerate(axes_dim):
        omega = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64, device=ids.device) / dim)
        ang = ids[..., i].double()[..., None] * omega  # an outer product, not a matmul (no FLOPs)
        parts.append(torch.stack([ang.cos(), -ang.sin(), ang.sin(), ang.cos()], dim=-1).reshape(*ang.shape, 2, 2))
    return torch.cat(parts, dim=-3).float().unsqueeze(1)


def apply_rope(q: torch.Tensor, k: torch.Tensor, pe: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    def rot(x: torch.Tensor) -> torch.Tensor:
        x_ = x.float().reshape(*x.shape[:-1], -1, 1, 2)
        return (pe[..., 0] * x_[..., 0] + pe[..., 1] * x_[..., 1]).reshape(*x.shape).type_as(x)

    return rot(q), rot(k)


# ---- layers --------------------------------------------------------------------------------------------------


class MLPEmbedder(nn.Module):
    def __init__(self, in_dim: int, hidden: int):
        super().__init__()
        self.in_layer, self.out_layer = nn.Linear(in_dim, hidden), nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_layer(F.silu(self.in_layer(x)))


class QKNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.query_norm, self.key_norm = nn.RMSNorm(dim, eps=1e-6), nn.RMSNorm(dim, eps=1e-6)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.query_norm(q).to(v), self.key_norm(k).to(v)


class Attention(nn.Module):
    """The qkv / norm / proj weights of one stream (the attention itself runs jointly in the block)."""

    def __init__(self, dim: int, heads: int, qkv_bias: bool):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.norm = QKNorm(dim // heads)
        self.proj = nn.Linear(dim, dim)

    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, -1, self.head_dim).permute(2, 0, 3, 1, 4)  # local heads under TP
        q, k = self.norm(q, k, v)
        return q, k, v


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
    q, k = apply_rope(q, k, pe)
    out = F.scaled_dot_product_attention(q, k, v)
    return out.transpose(1, 2).flatten(2)  # B H L D -> B L (H D)


class Modulation(nn.Module):
    def __init__(self, dim: int, double: bool):
        super().__init__()
        self.n = 6 if double else 3
        self.lin = nn.Linear(dim, self.n * dim)

    def forward(self, vec: torch.Tensor) -> list[torch.Tensor]:
        return list(self.lin(F.silu(vec))[:, None, :].chunk(self.n, dim=-1))  # shift, scale, gate (x2 if double)


def _mlp(dim: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, dim))


class DoubleStreamBlock(nn.Module):
    img_mod: Modulation
    txt_mod: Modulation
    img_norm1: nn.LayerNorm
    txt_norm1: nn.LayerNorm
    img_attn: Attention
    txt_attn: Attention
    img_norm2: nn.LayerNorm
    txt_norm2: nn.LayerNorm
    img_mlp: nn.Sequential
    txt_mlp: nn.Sequential

    def __init__(self, cfg: Config):
        super().__init__()
        h = cfg.hidden_size
        for side in ("img", "txt"):
            self.add_module(f"{side}_mod", Modulation(h, double=True))
            self.add_module(f"{side}_norm1", nn.LayerNorm(h, elementwise_affine=False, eps=1e-6))
            self.add_module(f"{side}_attn", Attention(h, cfg.num_heads, cfg.qkv_bias))
            self.add_module(f"{side}_norm2", nn.LayerNorm(h, elementwise_affine=False, eps=1e-6))
            self.add_module(f"{side}_mlp", _mlp(h, cfg.mlp_hidden))

    def forward(self, img: torch.Tensor, txt: torch.Tensor, vec: torch.Tensor, pe: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        i_sh1, i_sc1, i_g1, i_sh2, i_sc2, i_g2 = self.img_mod(vec)
        t_sh1, t_sc1, t_g1, t_sh2, t_sc2, t_g2 = self.txt_mod(vec)
        iq, ik, iv = self.img_attn.qkv_heads((1 + i_sc1) * self.img_norm1(img) + i_sh1)
        tq, tk, tv = self.txt_attn.qkv_heads((1 + t_sc1) * self.txt_norm1(txt) + t_sh1)
        attn = attend(torch.cat((tq, iq), 2), torch.cat((tk, ik), 2), torch.cat((tv, iv), 2), pe)
        txt_attn, img_attn = attn[:, : txt.shape[1]], attn[:, txt.shape[1]:]
        img = img + i_g1 * self.img_attn.proj(img_attn)
        img = img + i_g2 * self.img_mlp((1 + i_sc2) * self.img_norm2(img) + i_sh2)
        txt = txt + t_g1 * self.txt_attn.proj(txt_attn)
        txt = txt + t_g2 * self.txt_mlp((1 + t_sc2) * self.txt_norm2(txt) + t_sh2)
        return img, txt


class SingleStreamBlock(nn.Module):
    """Attention and MLP side by side on one sequence (ViT-22B's parallel layers), as FLUX's single blocks."""

    def __init__(self, cfg: Config):
        super().__init__()
        h, self.head_dim, self.mlp_hidden = cfg.hidden_size, cfg.head_dim, cfg.mlp_hidden
        self.linear1 = nn.Linear(h, 3 * h + self.mlp_hidden)
        self.linear2 = nn.Linear(h + self.mlp_hidden, h)
        self.norm = QKNorm(cfg.head_dim)
        self.pre_norm = nn.LayerNorm(h, elementwise_affine=False, eps=1e-6)
        self.mlp_act = nn.GELU(approximate="tanh")
        self.modulation = Modulation(h, double=False)

    def forward(self, x: torch.Tensor, vec: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
        shift, scale, gate = self.modulation(vec)
        b, n, h = x.shape
        fused = self.linear1((1 + scale) * self.pre_norm(x) + shift)
        local_h = fused.shape[-1] * h // (3 * h + self.mlp_hidden)  # under TP each rank holds 1/tp of both parts
        qkv, mlp = torch.split(fused, [3 * local_h, fused.shape[-1] - 3 * local_h], dim=-1)
        q, k, v = qkv.reshape(b, n, 3, -1, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = self.norm(q, k, v)
        out = self.linear2(torch.cat((attend(q, k, v, pe), self.mlp_act(mlp)), 2))
        return x + gate * out


class LastLayer(nn.Module):
    def __init__(self, h: int, out: int):
        super().__init__()
        self.norm_final = nn.LayerNorm(h, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(h, out)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(h, 2 * h))

    def forward(self, x: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(vec).chunk(2, dim=1)
        return self.linear((1 + scale[:, None, :]) * self.norm_final(x) + shift[:, None, :])


class Flux(nn.Module):
    """forward(img, img_ids, txt, txt_ids, timesteps, y) -> the velocity of each image token (torchtitan's signature)."""

    def __init__(self, cfg: Config, in_channels: int, context_in_dim: int, vec_in_dim: int):
        super().__init__()
        h = cfg.hidden_size
        self.cfg = cfg
        self.img_in = nn.Linear(in_channels, h)
        self.time_in = MLPEmbedder(TIME_DIM, h)
        self.vector_in = MLPEmbedder(vec_in_dim, h)
        self.txt_in = nn.Linear(context_in_dim, h)
        self.double_blocks = nn.ModuleList(DoubleStreamBlock(cfg) for _ in range(cfg.depth))
        self.single_blocks = nn.ModuleList(SingleStreamBlock(cfg) for _ in range(cfg.depth_single_blocks))
        self.final_layer = LastLayer(h, in_channels)
        self.init_weights()

    @property
    def blocks(self) -> list[nn.Module]:
        """Every transformer block, double then single: the units FSDP2 shards one by one (suite/backends/parallel/
        fsdp.py). A plain list, not a ModuleList: the state dict keeps torchtitan's names; the GPT-only plans (tensor
        parallel, pipeline, activation checkpointing) refuse it with their reasons."""
        return [*self.double_blocks, *self.single_blocks]

    def tp_plan_unsupported(self, tp: int) -> str | None:
        if self.cfg.num_heads % tp or self.cfg.mlp_hidden % tp:
            return (f"parallel.tp={tp} does not divide model.num_heads={self.cfg.num_heads} and the MLP width "
                    f"{self.cfg.mlp_hidden}")
        return None

    def apply_tp_plan(self, tp_mesh: Any, sequence_parallel: bool, loss_parallel: bool) -> None:
        from suite.models.flux.parallelize import apply_tp  # torch.distributed only where a tp layout runs

        apply_tp(self, tp_mesh)

    @torch.no_grad()
    def init_weights(self, std: float = 0.02) -> None:
        """torchtitan's init: Xavier-uniform linears, normal(0.02) embedders, zero modulation and output (DiT)."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for emb in (self.time_in, self.vector_in):
            nn.init.normal_(emb.in_layer.weight, std=std)
            nn.init.normal_(emb.out_layer.weight, std=std)
        for m in self.modules():
            if isinstance(m, Modulation):
                nn.init.zeros_(m.lin.weight)
                nn.init.zeros_(m.lin.bias)
        for lin in (self.final_layer.linear, self.final_layer.adaLN_modulation[1]):
            assert isinstance(lin, nn.Linear)
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, img: torch.Tensor, img_ids: torch.Tensor, txt: torch.Tensor, txt_ids: torch.Tensor,
                timesteps: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        img, txt = self.img_in(img), self.txt_in(txt)
        vec = self.time_in(timestep_embedding(timesteps).to(img)) + self.vector_in(y)
        pe = rope(torch.cat((txt_ids, img_ids), dim=1), self.cfg.axes_dim, self.cfg.theta)
        for block in self.double_blocks:
            img, txt = block(img, txt, vec, pe)
        x = torch.cat((txt, img), dim=1)
        for single in self.single_blocks:
            x = single(x, vec, pe)
        return self.final_layer(x[:, txt.shape[1]:], vec)


# ---- the component: dimensions from the data, analytic FLOPs ------------------------------------------------------


def dims(cfg: Config, meta: dict[str, Any]) -> dict[str, int]:
    """Token counts and widths of one sample: image tokens, text tokens, and the input widths."""
    c, hgt, wid = meta["latent_shape"]
    p = cfg.patch_size
    cond = meta["conditioning"][cfg.conditioning]
    ctx, vec = cfg.context_in_dim or cond["context_dim"], cfg.vec_in_dim or cond["vec_dim"]
    if (ctx, vec) != (cond["context_dim"], cond["vec_dim"]):
        raise ValueError(f"model.context_in_dim/vec_in_dim ({ctx}, {vec}) differ from the data's "
                         f"{cfg.conditioning} conditioning ({cond['context_dim']}, {cond['vec_dim']})")
    return {"in": c * p * p, "img": (hgt // p) * (wid // p), "txt": cond["tokens"], "ctx": ctx, "vec": vec}


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    d = dims(cfg, meta)
    return Flux(cfg, d["in"], d["ctx"], d["vec"])


def forward_flops_by_class(cfg: Config, meta: dict[str, Any]) -> dict[str, float]:
    """Forward matmul FLOPs of one sample: per-token linears on each stream, per-sample embedders and modulation,
    and attention over the joint text + image sequence (4 * L^2 * hidden per block)."""
    d = dims(cfg, meta)
    h, r, n_img, n_txt = cfg.hidden_size, cfg.mlp_hidden, d["img"], d["txt"]
    n = n_img + n_txt
    per_stream = 3 * h * h + h * h + 2 * h * r  # qkv, proj, MLP in and out
    mm = linear_flops(d["in"], h, n_img) + linear_flops(d["ctx"], h, n_txt)
    mm += linear_flops(TIME_DIM, h) + linear_flops(d["vec"], h) + 2 * linear_flops(h, h)  # time_in, vector_in
    mm += cfg.depth * (2 * linear_flops(h, 6 * h) + 2.0 * per_stream * n)  # modulation + both streams' tokens
    mm += cfg.depth_single_blocks * (linear_flops(h, 3 * h) + linear_flops(h, 3 * h + r, n)
                                     + linear_flops(h + r, h, n))
    mm += linear_flops(h, 2 * h) + linear_flops(h, d["in"], n_img)  # final adaLN and output
    attn = (cfg.depth + cfg.depth_single_blocks) * attention_flops(n, cfg.num_heads, cfg.head_dim)
    return {"matmul": mm, "attention": attn}


def flops_by_class(cfg: Config, meta: dict[str, Any]) -> dict[str, float]:
    return {k: TRAIN_MULTIPLIER * v for k, v in forward_flops_by_class(cfg, meta).items()}


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    return sum(flops_by_class(cfg, meta).values())


COMPONENT = Component(Config, build=build, flops_per_sample=flops_per_sample, flops_by_class=flops_by_class)

"""The airbench CIFAR-10 net (Keller Jordan, airbench94): a 2x2 patch conv stem, then three conv groups
(conv - maxpool - BN - GELU - conv - BN - GELU), global max-pool and a bias-free linear head scaled by 1/9.
The whitening initialisation, lookahead and TTA of the record script are training tricks, not the net."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from suite.registry import Component


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    widths: list[int] = Field(default=[64, 256, 256], min_length=1, description="channels of each conv group")
    stem_width: int = Field(default=24, gt=0)
    head_scale: float = Field(default=1 / 9, gt=0)
    bn_momentum: float = Field(default=0.6, gt=0, lt=1, description="airbench's BN momentum (PyTorch convention)")


class Scale(nn.Module):
    def __init__(self, s: float):
        super().__init__()
        self.s = s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.s


def _layers(cfg: Config, meta: dict[str, Any]) -> list[tuple[str, dict[str, int]]]:
    c, h, w = meta["input_shape"]
    layers: list[tuple[str, dict[str, int]]] = [("conv", {"cin": c, "cout": cfg.stem_width, "k": 2, "h": h - 1,
                                                          "w": w - 1, "pad": 0})]
    c, h, w = cfg.stem_width, h - 1, w - 1
    for width in cfg.widths:
        layers.append(("conv", {"cin": c, "cout": width, "k": 3, "h": h, "w": w, "pad": 1}))
        h, w = h // 2, w // 2
        layers.append(("pool_bn", {"c": width}))
        layers.append(("conv", {"cin": width, "cout": width, "k": 3, "h": h, "w": w, "pad": 1}))
        layers.append(("bn", {"c": width}))
        c = width
    layers.append(("linear", {"fin": c, "fout": meta["num_classes"]}))
    return layers


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    mods: list[nn.Module] = []
    for kind, s in _layers(cfg, meta):
        if kind == "conv":
            mods.append(nn.Conv2d(s["cin"], s["cout"], s["k"], padding=s["pad"], bias=s["k"] == 2))
            if s["k"] == 2:
                mods.append(nn.GELU())
        elif kind == "pool_bn":
            mods += [nn.MaxPool2d(2), nn.BatchNorm2d(s["c"], momentum=cfg.bn_momentum), nn.GELU()]
        elif kind == "bn":
            mods += [nn.BatchNorm2d(s["c"], momentum=cfg.bn_momentum), nn.GELU()]
        else:
            mods += [nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(s["fin"], s["fout"], bias=False),
                     Scale(cfg.head_scale)]
    return nn.Sequential(*mods)


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    """Matmul FLOPs, forward x 3: conv 2*cin*cout*k^2*h_out*w_out, linear 2*fin*fout (BN, GELU, pooling not
    counted)."""
    fwd = 0.0
    for kind, s in _layers(cfg, meta):
        if kind == "conv":
            fwd += 2 * s["cin"] * s["cout"] * s["k"] ** 2 * s["h"] * s["w"]
        elif kind == "linear":
            fwd += 2 * s["fin"] * s["fout"]
    return 3 * fwd


def flops_by_class(cfg: Config, meta: dict[str, Any]) -> dict[str, float]:
    """flops_per_sample split into convolutions and the linear head (matmul)."""
    out = {"convolution": 0.0, "matmul": 0.0}
    for kind, s in _layers(cfg, meta):
        if kind == "conv":
            out["convolution"] += 3 * 2 * s["cin"] * s["cout"] * s["k"] ** 2 * s["h"] * s["w"]
        elif kind == "linear":
            out["matmul"] += 3 * 2 * s["fin"] * s["fout"]
    return out


COMPONENT = Component(Config, build=build, flops_per_sample=flops_per_sample, flops_by_class=flops_by_class)

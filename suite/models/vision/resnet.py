"""ResNet (He et al. 2016) in the v1.5 form MLPerf trains (stride on the bottleneck's 3x3 conv): basic or
bottleneck blocks, an ImageNet stem (7x7/2 conv + 3x3/2 max-pool) or a CIFAR stem (3x3/1). ResNet-50 is
block=bottleneck, layers=[3, 4, 6, 3], width=64. The module and its FLOPs come from one conv list."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from suite.models.vision.resnet_config import Config
from suite.registry import Component


def _out(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


class Block(nn.Module):
    def __init__(self, convs: list[dict[str, int]], down: dict[str, int] | None, zero_init: bool):
        super().__init__()
        body: list[nn.Module] = []
        for i, c in enumerate(convs):
            body += [nn.Conv2d(c["cin"], c["cout"], c["k"], c["stride"], c["pad"], bias=False), nn.BatchNorm2d(c["cout"])]
            if i < len(convs) - 1:
                body.append(nn.ReLU(inplace=True))
        if zero_init:
            nn.init.zeros_(body[-1].weight)  # type: ignore[arg-type]
        self.body = nn.Sequential(*body)
        self.down = (nn.Sequential(nn.Conv2d(down["cin"], down["cout"], 1, down["stride"], bias=False),
                                   nn.BatchNorm2d(down["cout"])) if down else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.down(x))


def plan(cfg: Config, meta: dict[str, Any]) -> dict[str, Any]:
    """Every conv with its input/output channels, kernel, stride and output size."""
    c, h, w = meta["input_shape"]
    if cfg.stem == "imagenet":
        stem = {"cin": c, "cout": cfg.width, "k": 7, "stride": 2, "pad": 3}
        h, w = _out(h, 7, 2, 3), _out(w, 7, 2, 3)
        stem.update(h=h, w=w)
        h, w = _out(h, 3, 2, 1), _out(w, 3, 2, 1)
    else:
        stem = {"cin": c, "cout": cfg.width, "k": 3, "stride": 1, "pad": 1, "h": h, "w": w}
    expansion = 4 if cfg.block == "bottleneck" else 1
    cin = cfg.width
    blocks = []
    for stage, n in enumerate(cfg.layers):
        mid = cfg.width * 2**stage
        cout = mid * expansion
        for b in range(n):
            stride = 2 if stage > 0 and b == 0 else 1
            ho, wo = _out(h, 3, stride, 1), _out(w, 3, stride, 1)
            if cfg.block == "bottleneck":
                convs = [{"cin": cin, "cout": mid, "k": 1, "stride": 1, "pad": 0, "h": h, "w": w},
                         {"cin": mid, "cout": mid, "k": 3, "stride": stride, "pad": 1, "h": ho, "w": wo},
                         {"cin": mid, "cout": cout, "k": 1, "stride": 1, "pad": 0, "h": ho, "w": wo}]
            else:
                convs = [{"cin": cin, "cout": mid, "k": 3, "stride": stride, "pad": 1, "h": ho, "w": wo},
                         {"cin": mid, "cout": cout, "k": 3, "stride": 1, "pad": 1, "h": ho, "w": wo}]
            down = ({"cin": cin, "cout": cout, "k": 1, "stride": stride, "h": ho, "w": wo}
                    if stride != 1 or cin != cout else None)
            blocks.append((convs, down))
            cin, h, w = cout, ho, wo
    return {"stem": stem, "blocks": blocks, "features": cin, "classes": int(meta["num_classes"])}


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    p = plan(cfg, meta)
    s = p["stem"]
    mods: list[nn.Module] = [nn.Conv2d(s["cin"], s["cout"], s["k"], s["stride"], s["pad"], bias=False),
                             nn.BatchNorm2d(s["cout"]), nn.ReLU(inplace=True)]
    if cfg.stem == "imagenet":
        mods.append(nn.MaxPool2d(3, 2, 1))
    mods += [Block(convs, down, cfg.zero_init_residual) for convs, down in p["blocks"]]
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(p["features"], p["classes"])]
    net = nn.Sequential(*mods)
    if cfg.init == "he_normal":
        _he_normal(net)
    return net


@torch.no_grad()
def _he_normal(net: nn.Module) -> None:
    """Keras `he_normal` (a normal of std sqrt(2 / fan_in), truncated at 2 std and rescaled by 1/0.8796 so the
    std stays sqrt(2 / fan_in)) on every conv, and RandomNormal(0.01) on the head, as MLPerf's resnet_model.py."""
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            fan_in = m.in_channels * m.kernel_size[0] * m.kernel_size[1]
            std = (2.0 / fan_in) ** 0.5 / 0.87962566103423978
            nn.init.trunc_normal_(m.weight, 0.0, std, -2 * std, 2 * std)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            nn.init.zeros_(m.bias)


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    """Forward matmul FLOPs x 3: each conv 2*cin*cout*k^2*h_out*w_out (downsample 1x1 convs included), the
    head 2*features*classes. ResNet-50 at 224x224 gives 2 x 4.09 GMACs forward (the usual "4.1 GFLOPs")."""
    p = plan(cfg, meta)

    def conv(c: dict[str, int]) -> float:
        return 2.0 * c["cin"] * c["cout"] * c["k"] ** 2 * c["h"] * c["w"]

    fwd = conv(p["stem"]) + 2.0 * p["features"] * p["classes"]
    for convs, down in p["blocks"]:
        fwd += sum(conv(c) for c in convs) + (conv({**down, "k": 1}) if down else 0.0)
    return 3 * fwd


def flops_by_class(cfg: Config, meta: dict[str, Any]) -> dict[str, float]:
    """flops_per_sample split into convolutions and the linear head (matmul)."""
    p = plan(cfg, meta)
    head = 3 * 2.0 * p["features"] * p["classes"]
    return {"convolution": flops_per_sample(cfg, meta) - head, "matmul": head}


COMPONENT = Component(Config, build=build, flops_per_sample=flops_per_sample, flops_by_class=flops_by_class)

"""A small VGG-style CNN for image classification: [conv3x3-ReLU]*per_stage then 2x2 max-pool, per stage."""

from __future__ import annotations

from typing import Any

from torch import nn

from suite.models.vision.cnn_config import Config
from suite.registry import Component


def _layers(cfg: Config, meta: dict[str, Any]) -> list[tuple[str, dict[str, int]]]:
    """The layer list with shapes: the model and its analytic FLOPs are built from the same description."""
    c, h, w = meta["input_shape"]
    layers: list[tuple[str, dict[str, int]]] = []
    for out in cfg.channels:
        for _ in range(cfg.convs_per_stage):
            layers.append(("conv", {"cin": c, "cout": out, "k": 3, "h": h, "w": w}))
            c = out
        layers.append(("pool", {"c": c, "h": h, "w": w}))
        h, w = h // 2, w // 2
    layers.append(("linear", {"fin": c * h * w, "fout": cfg.hidden}))
    layers.append(("linear", {"fin": cfg.hidden, "fout": meta["num_classes"]}))
    return layers


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    mods: list[nn.Module] = []
    linears = 0
    for kind, s in _layers(cfg, meta):
        if kind == "conv":
            mods += [nn.Conv2d(s["cin"], s["cout"], s["k"], padding=1), nn.ReLU(inplace=True)]
        elif kind == "pool":
            mods.append(nn.MaxPool2d(2))
        else:
            if linears == 0:
                mods.append(nn.Flatten())
            mods.append(nn.Linear(s["fin"], s["fout"]))
            linears += 1
            if linears == 1:
                mods.append(nn.ReLU(inplace=True))
                if cfg.dropout:
                    mods.append(nn.Dropout(cfg.dropout))
    return nn.Sequential(*mods)


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    """Forward+backward matmul FLOPs: 3 x forward (backward = grad wrt input + grad wrt weights).

    conv: 2*cin*cout*k*k*h*w (stride 1, same padding); linear: 2*fin*fout. Pool/ReLU/bias are not counted
    (element-wise, like PaLM's model-FLOPs convention).
    """
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

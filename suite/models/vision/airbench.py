"""The airbench94 CIFAR-10 net (Keller Jordan, cifar10-airbench `airbench94.py`), with the record's own tricks:
a 2x2 patch-whitening conv initialised from training images (frozen weights, bias trained for the first
epochs), three conv groups (conv - maxpool - BN - GELU - conv - BN - GELU) with dirac-initialised convs and
BN whose weight is frozen, a max-pool and a bias-free linear head scaled by 1/9; lookahead (an EMA of every
float tensor, copied back into the net every 5 steps) and test-time augmentation (mirror + translate) in eval.
docs/workloads.md maps every line to the reference."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.vision.airbench_config import Config
from suite.registry import Component


class Scale(nn.Module):
    def __init__(self, s: float):
        super().__init__()
        self.s = s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.s


def _conv(cin: int, cout: int, k: int = 3, bias: bool = False) -> nn.Conv2d:
    conv = nn.Conv2d(cin, cout, k, padding="same" if k == 3 else 0, bias=bias)
    with torch.no_grad():  # airbench94 Conv.reset_parameters: the first cin filters are identities
        nn.init.dirac_(conv.weight[: conv.weight.size(1)])
        if conv.bias is not None:
            conv.bias.zero_()
    return conv


def _bn(c: int, cfg: Config) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c, eps=cfg.bn_eps, momentum=1 - cfg.bn_momentum)
    bn.weight.requires_grad = False  # airbench94: BatchNorm(weight=False, bias=True)
    bn.bias.airbench_bias_scaled = True  # type: ignore[attr-defined]  # its lr is scaled up (AirbenchSGD)
    return bn


class AirbenchNet(nn.Sequential):
    def __init__(self, cfg: Config, meta: dict[str, Any]):
        c = meta["input_shape"][0]
        mods: list[nn.Module] = [_conv(c, cfg.stem_width, 2, bias=True), nn.GELU()]
        c = cfg.stem_width
        for width in cfg.widths:
            mods += [_conv(c, width), nn.MaxPool2d(2), _bn(width, cfg), nn.GELU(),
                     _conv(width, width), _bn(width, cfg), nn.GELU()]
            c = width
        mods += [nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(c, meta["num_classes"], bias=False),
                 Scale(cfg.head_scale)]
        super().__init__(*mods)
        self.cfg = cfg
        self[0].weight.requires_grad = False  # the whitening filters are fixed once initialised
        self.steps = 0
        self._ema: dict[str, torch.Tensor] | None = None
        self._frozen_bias: torch.Tensor | None = None

    # ---- airbench94 lines 242-257: whitening init ---------------------------------------------------------
    @torch.no_grad()
    def init_from_data(self, train_x: torch.Tensor) -> None:
        """Set the stem's filters to the ZCA-like whitening of 2x2 patches of (normalised) training images."""
        if not self.cfg.whiten:
            return
        stem = self[0]
        x = train_x[: self.cfg.whiten_images].to(stem.weight.device).float()
        h, w = stem.weight.shape[2:]
        c = x.shape[1]
        patches = x.unfold(2, h, 1).unfold(3, w, 1).transpose(1, 3).reshape(-1, c, h, w).float()
        flat = patches.view(patches.shape[0], -1)
        cov = (flat.T @ flat) / flat.shape[0]
        eigenvalues, eigenvectors = torch.linalg.eigh(cov, UPLO="U")
        eigenvalues = eigenvalues.flip(0).view(-1, 1, 1, 1)
        eigenvectors = eigenvectors.T.reshape(c * h * w, c, h, w).flip(0)
        scaled = eigenvectors / torch.sqrt(eigenvalues + self.cfg.whiten_eps)
        n = min(stem.weight.shape[0] // 2, scaled.shape[0])  # 12 and 12 in airbench94: (filters, -filters)
        stem.weight[: 2 * n] = torch.cat((scaled[:n], -scaled[:n]))

    # ---- airbench94 lines 263-271, 410, 430-436: lookahead and the stem-bias freeze ------------------------
    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        """Called by the backend after every optimizer step."""
        self.steps += 1
        cfg, bias = self.cfg, self[0].bias
        freeze = cfg.whiten_bias_steps is not None and self.steps > cfg.whiten_bias_steps
        if freeze and self._frozen_bias is not None:
            bias.copy_(self._frozen_bias)  # frozen: the optimizer's update (momentum, decay) is undone
        if cfg.lookahead_every and cfg.lookahead_total_steps:
            state = self.state_dict(keep_vars=True)
            if self._ema is None:  # airbench starts it before step 1; by step 5 its weight is ~1e-6: the same
                self._ema = {k: v.detach().clone() for k, v in state.items()}
            total = cfg.lookahead_total_steps
            decay = None
            if self.steps >= total:
                decay = 1.0  # the last step copies the EMA into the net
            elif self.steps % cfg.lookahead_every == 0:
                decay = 0.95**5 * (self.steps / total) ** 3
            if decay is not None:
                for key, v in state.items():
                    if v.dtype in (torch.half, torch.bfloat16, torch.float):
                        self._ema[key].lerp_(v.detach(), 1 - decay)
                        v.data.copy_(self._ema[key])
        if cfg.whiten_bias_steps is not None and self.steps >= cfg.whiten_bias_steps:
            self._frozen_bias = bias.detach().clone()

    # ---- airbench94 lines 307-340: test-time augmentation -------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        net = super().forward
        if self.training or self.cfg.tta_level == 0:
            return net(x)

        def mirror(v: torch.Tensor) -> torch.Tensor:
            return 0.5 * net(v) + 0.5 * net(v.flip(-1))

        if self.cfg.tta_level == 1:
            return mirror(x)
        padded = F.pad(x, (1,) * 4, "reflect")
        h, w = x.shape[-2:]
        views = [padded[:, :, 0:h, 0:w], padded[:, :, 2 : h + 2, 2 : w + 2]]
        return 0.5 * mirror(x) + 0.5 * torch.stack([mirror(v) for v in views]).mean(0)


def build(cfg: Config, meta: dict[str, Any]) -> nn.Module:
    return AirbenchNet(cfg, meta)


def _layers(cfg: Config, meta: dict[str, Any]) -> list[tuple[str, dict[str, int]]]:
    c, h, w = meta["input_shape"]
    layers: list[tuple[str, dict[str, int]]] = [("conv", {"cin": c, "cout": cfg.stem_width, "k": 2, "h": h - 1,
                                                          "w": w - 1})]
    c, h, w = cfg.stem_width, h - 1, w - 1
    for width in cfg.widths:
        layers.append(("conv", {"cin": c, "cout": width, "k": 3, "h": h, "w": w}))
        h, w = h // 2, w // 2
        layers.append(("conv", {"cin": width, "cout": width, "k": 3, "h": h, "w": w}))
        c = width
    layers.append(("linear", {"fin": c, "fout": meta["num_classes"]}))
    return layers


def flops_per_sample(cfg: Config, meta: dict[str, Any]) -> float:
    """Matmul FLOPs of a training step, forward x 3: conv 2*cin*cout*k^2*h_out*w_out, linear 2*fin*fout (BN,
    GELU, pooling not counted). Test-time augmentation (6 forwards per eval image) is eval, not counted."""
    fwd = 0.0
    for kind, s in _layers(cfg, meta):
        if kind == "conv":
            fwd += 2 * s["cin"] * s["cout"] * s["k"] ** 2 * s["h"] * s["w"]
        else:
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

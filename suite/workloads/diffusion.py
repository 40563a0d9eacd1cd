"""`task: diffusion`: rectified-flow training of a diffusion transformer (suite/models/flux/model.py), MLPerf flux1's task.

The data is either an image set with labels (digits, Fashion-MNIST: pixels rescaled to [-1, 1] are the "latents",
the one-hot label is the conditioning) or latents with text embeddings (suite/data/diffusion/flux_latents.py, the MLPerf
reference's preprocessed CC12M / COCO). Everything random in a step (which samples, the noise, the timesteps, the
latent drawn from the VAE's mean and log-variance, the dropped captions) is drawn for the whole global batch from a
generator seeded by (seed, step), and each rank takes its slice: any layout trains on the same numbers as one
process. Validation (`val_loss`) uses fixed timesteps and fixed noise (suite/workloads/rectified_flow.py).
`side_files` writes a grid of generated samples (one row per class) beside the result.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.data.base import TensorSplits
from suite.models.flux import model as flux
from suite.workloads import rectified_flow as rf
from suite.workloads.base import WorkloadBase
from suite.workloads.checks import DiffusionChecks, check_shapes, conditioning_sources
from suite.workloads.contract import Batch, Context

GRID_PER_CLASS, GRID_STEPS, GRID_SEED = 8, 25, 1234


class ImageLatents:
    """An image set with labels in the shape this task reads: pixels in [-1, 1] as latents, labels as conditioning."""

    def __init__(self, splits: TensorSplits, eval_timesteps: int):
        lo, hi = float(splits.train_x.min()), float(splits.train_x.max())
        scale = (hi - lo) or 1.0
        self.train_x, self.val_x = [(x - lo) / scale * 2 - 1 for x in (splits.train_x, splits.val_x)]
        self.train_y, self.val_y = splits.train_y, splits.val_y
        self.classes = int(splits.meta.get("num_classes") or 0)
        self.n_train, self.n_val = len(self.train_x), len(self.val_x)
        self.val_t = torch.arange(self.n_val) % eval_timesteps  # each sample its fixed timestep, as MLPerf's COCO set
        self.meta: dict[str, Any] = {"latent_shape": tuple(self.train_x.shape[1:]),
                                     "conditioning": conditioning_sources(self.classes),
                     "source": splits.meta.get("source")}

    def _cond(self, y: torch.Tensor, conditioning: str) -> dict[str, torch.Tensor]:
        if conditioning == "label":
            hot = F.one_hot(y, self.classes).float()
            return {"txt": hot[:, None, :], "y": hot}
        return {"txt": torch.zeros(len(y), 1, 1, device=y.device), "y": torch.zeros(len(y), 1, device=y.device)}

    def train_rows(self, idx: torch.Tensor, conditioning: str, g: torch.Generator) -> dict[str, torch.Tensor]:
        return {"x0": self.train_x[idx], **self._cond(self.train_y[idx], conditioning)}

    def val_rows(self, idx: torch.Tensor, conditioning: str, g: torch.Generator) -> dict[str, torch.Tensor]:
        return {"x0": self.val_x[idx], **self._cond(self.val_y[idx], conditioning), "t_index": self.val_t[idx]}


class Diffusion(DiffusionChecks, WorkloadBase):
    def __init__(self, spec, ctx: Context):
        super().__init__(spec, ctx)
        cfg = self.model_cfg
        loaded = self.data_component.load(self.data_cfg)
        self.data: Any = ImageLatents(loaded, cfg.eval_timesteps) if isinstance(loaded, TensorSplits) else loaded
        self.meta: dict[str, Any] = self.data.meta
        for loc, msg in check_shapes(cfg, self.meta, spec.data.name):
            raise ValueError(f"{loc}: {msg}")
        self.check_batch_fits(self.data.n_train)
        self.n_val = min(self.data.n_val, spec.eval.subset or self.data.n_val)
        _, self.h, self.w = (int(d) for d in self.meta["latent_shape"])

    def build_model(self) -> nn.Module:
        return self.model_component.build(self.model_cfg, self.meta)

    # ---- training ------------------------------------------------------------------------------------------

    def _step_rows(self, step: int, local_bs: int, rank: int, world: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(self.ctx.seed * 1_000_003 + step)
        gbs = local_bs * world
        per_epoch = self.data.n_train // gbs  # the last partial batch of an epoch is dropped
        epoch, i = divmod(step, per_epoch)
        perm = torch.randperm(self.data.n_train, generator=torch.Generator().manual_seed(self.ctx.seed * 100_003 + epoch))
        idx = perm[i * gbs: (i + 1) * gbs]
        rows = self.data.train_rows(idx, self.model_cfg.conditioning, g)
        rows["noise"] = torch.randn(rows["x0"].shape, generator=g)
        cfg = self.model_cfg
        rows["t"] = rf.sample_timesteps(gbs, cfg.timestep_sampling, g, cfg.logit_mean, cfg.logit_std)
        part = slice(rank * local_bs, (rank + 1) * local_bs)
        return {k: v[part].to(self.device) for k, v in rows.items()}

    def train_batches(self, rank: int, world: int) -> Iterator[Batch]:
        local_bs, step = self.local_batch_size(world), 0
        while True:
            yield self._step_rows(step, local_bs, rank, world)
            step += 1

    def predict(self, model: nn.Module, xt: torch.Tensor, t: torch.Tensor, txt: torch.Tensor, y: torch.Tensor
                ) -> torch.Tensor:
        p, b = self.model_cfg.patch_size, xt.shape[0]
        ids = flux.image_ids(b, self.h, self.w, p).to(xt)
        txt_ids = torch.zeros(b, txt.shape[1], 3, dtype=xt.dtype, device=xt.device)
        out = model(flux.pack(xt, p), ids, txt.to(xt), txt_ids, t.to(xt), y.to(xt))
        return flux.unpack(out, self.h, self.w, p)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x0, noise, t = batch["x0"], batch["noise"], batch["t"]
        pred = self.predict(model, rf.interpolate(x0, noise, t), t, batch["txt"], batch["y"])
        return F.mse_loss(pred.float(), rf.velocity(x0, noise).float())

    # ---- validation ----------------------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        was_training = model.training
        model.eval()
        cfg, bs = self.model_cfg, self.spec.data.eval_batch_size or 256
        means = rf.TimestepMeans(cfg.eval_timesteps)
        for start in range(0, self.n_val, bs):
            g = torch.Generator().manual_seed(cfg.eval_noise_seed * 1_000_003 + start)  # fixed noise per batch
            idx = torch.arange(start, min(start + bs, self.n_val))
            rows = self.data.val_rows(idx, cfg.conditioning, g)
            x0 = rows["x0"].to(self.device)
            noise = torch.randn(x0.shape, generator=g).to(x0)
            t = rows["t_index"].to(x0) / cfg.eval_timesteps
            pred = self.predict(model, rf.interpolate(x0, noise, t), t, rows["txt"].to(self.device),
                                rows["y"].to(self.device))
            means.add(rf.per_sample_loss(pred, x0, noise), rows["t_index"])
        model.train(was_training)
        return {"val_loss": means.value()}

    def mllog_hyperparameters(self) -> dict[str, int]:
        """flux1's rules read the evaluation frequency in samples (closed_flux1.yaml)."""
        return {"evaluation_frequency": int(self.spec.eval.every_steps) * int(self.spec.data.batch_size)}

    def train_samples(self) -> int:
        return int(self.data.n_train)

    def eval_samples(self) -> int:
        return int(self.n_val)

    def flops_per_sample(self) -> float:
        return float(flux.flops_per_sample(self.model_cfg, self.meta))

    def tokens_per_sample(self) -> int:
        d = flux.dims(self.model_cfg, self.meta)
        return d["img"] + d["txt"]

    # ---- the sample grid beside the result ---------------------------------------------------------------------

    @torch.no_grad()
    def side_files(self, model: nn.Module) -> dict[str, bytes]:
        """`.samples.png`: GRID_PER_CLASS samples per class (one row each), Euler-integrated from fixed noise."""
        cfg = self.model_cfg
        if cfg.conditioning != "label" or not isinstance(self.data, ImageLatents):
            return {}  # text-conditioned latents need the VAE decoder to become pictures; none is loaded
        was_training = model.training
        model.eval()
        classes = self.data.classes
        y = torch.arange(classes).repeat_interleave(GRID_PER_CLASS).to(self.device)
        cond = self.data._cond(y, "label")
        g = torch.Generator().manual_seed(GRID_SEED)
        noise = torch.randn((len(y), *self.meta["latent_shape"]), generator=g).to(self.device)
        x = rf.euler_sample(lambda xt, t: self.predict(model, xt, t, cond["txt"], cond["y"]), noise, GRID_STEPS)
        model.train(was_training)
        tiles = ((x.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).cpu()[:, 0]  # first channel, grey
        tiles = F.pad(tiles, (1, 1, 1, 1), value=96)  # a grey frame: tiles stay apart on a black background
        h, w = self.h + 2, self.w + 2
        rows = tiles.reshape(classes, GRID_PER_CLASS, h, w).permute(0, 2, 1, 3)
        return {".samples.png": png_grey(rows.reshape(classes * h, GRID_PER_CLASS * w), scale=4)}


def png_grey(pixels: torch.Tensor, scale: int = 1) -> bytes:
    """A greyscale 8-bit PNG of a (H, W) uint8 tensor, each pixel a scale x scale square (zlib only, no Pillow)."""
    a = pixels.repeat_interleave(scale, 0).repeat_interleave(scale, 1).numpy()
    raw = b"".join(b"\x00" + row.tobytes() for row in a)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    out = io.BytesIO()
    out.write(b"\x89PNG\r\n\x1a\n")
    out.write(chunk(b"IHDR", struct.pack(">IIBBBBB", a.shape[1], a.shape[0], 8, 0, 0, 0, 0)))
    out.write(chunk(b"IDAT", zlib.compress(raw, 9)))
    out.write(chunk(b"IEND", b""))
    return out.getvalue()

"""ImageNet decoded and augmented on the training device: DataLoader workers only read the JPEG bytes; the main
process decodes a whole batch with `torchvision.io.decode_jpeg(..., device="cuda")` (nvJPEG) and crops,
resizes, flips and normalises there. With 8 Pillow workers the CPU decode is what bounds an H200; this moves it
to the GPU. Files nvJPEG cannot read (ImageNet has a few CMYK JPEGs and one PNG) fall back to Pillow one by one.
The crop follows the Pillow path's RandomResizedCrop (suite/data/vision/imagenet.py), so the two differ only in the
resampling filter's rounding."""

from __future__ import annotations

import importlib.util
import io
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from suite.data.base import DataMissing
from suite.data.vision.imagenet import MEAN, STD, ImageFolderSplits

Decoder = Callable[[list[torch.Tensor]], list[torch.Tensor]]  # encoded bytes -> uint8 CHW images


class EncodedDataset(torch.utils.data.Dataset):
    def __init__(self, splits: ImageFolderSplits, train: bool):
        self.root, self.items = splits.root, splits.train if train else splits.val

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        rel, label = self.items[i]
        return torch.from_numpy(np.fromfile(self.root / rel, dtype=np.uint8)), label


def collate(items: list[tuple[torch.Tensor, int]]) -> tuple[list[torch.Tensor], torch.Tensor]:
    return [b for b, _ in items], torch.tensor([y for _, y in items])


def pillow_decode(blob: torch.Tensor) -> torch.Tensor:
    try:
        from PIL import Image
    except ImportError:
        raise DataMissing("decoding ImageNet needs Pillow: pip install 'trainbench-suite[cv]'") from None
    with Image.open(io.BytesIO(blob.numpy().tobytes())) as im:
        return torch.from_numpy(np.asarray(im.convert("RGB"), dtype=np.uint8).copy()).permute(2, 0, 1)


def pillow_decoder(device: torch.device) -> Decoder:
    return lambda blobs: [pillow_decode(b).to(device, non_blocking=True) for b in blobs]


def torchvision_available() -> bool:
    return importlib.util.find_spec("torchvision") is not None


def torchvision_decoder(device: torch.device) -> Decoder:
    from torchvision.io import ImageReadMode, decode_jpeg

    def decode(blobs: list[torch.Tensor]) -> list[torch.Tensor]:
        try:
            return list(decode_jpeg(blobs, mode=ImageReadMode.RGB, device=device))
        except RuntimeError:  # one unreadable file fails the batch: decode one by one, Pillow for the odd ones
            out = []
            for b in blobs:
                try:
                    out.append(decode_jpeg(b, mode=ImageReadMode.RGB, device=device))
                except RuntimeError:
                    out.append(pillow_decode(b).to(device))
            return out

    return decode


def crop_box(h: int, w: int, min_scale: float, g: torch.Generator) -> tuple[int, int, int, int]:
    """RandomResizedCrop's box (area in [min_scale, 1], log-uniform aspect in [3/4, 4/3], 10 tries, then the
    centred square): (y0, x0, height, width)."""
    area = h * w
    for _ in range(10):
        target = area * float(torch.empty(1).uniform_(min_scale, 1.0, generator=g))
        ratio = math.exp(float(torch.empty(1).uniform_(math.log(3 / 4), math.log(4 / 3), generator=g)))
        cw, ch = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < cw <= w and 0 < ch <= h:
            return (int(torch.randint(0, h - ch + 1, (1,), generator=g)),
                    int(torch.randint(0, w - cw + 1, (1,), generator=g)), ch, cw)
    side = min(h, w)
    return (h - side) // 2, (w - side) // 2, side, side


def _resize(img: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    return F.interpolate(img[None].float(), size=size, mode="bilinear", antialias=True, align_corners=False)[0]


def _normalise(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(MEAN, device=x.device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=x.device).view(1, 3, 1, 1) * 255
    return (x - mean) / std


def train_view(img: torch.Tensor, size: int, min_scale: float, g: torch.Generator) -> torch.Tensor:
    y0, x0, ch, cw = crop_box(img.shape[1], img.shape[2], min_scale, g)
    out = _resize(img[:, y0 : y0 + ch, x0 : x0 + cw], (size, size))
    return out.flip(-1) if float(torch.rand(1, generator=g)) < 0.5 else out


def eval_view(img: torch.Tensor, size: int, resize: int) -> torch.Tensor:
    h, w = img.shape[1:]
    scale = resize / min(h, w)
    img = _resize(img, (max(size, round(h * scale)), max(size, round(w * scale))))
    h, w = img.shape[1:]
    y0, x0 = (h - size) // 2, (w - size) // 2
    return img[:, y0 : y0 + size, x0 : x0 + size]


def device_batches(loader: Any, decoder: Decoder, device: torch.device, train: bool, size: int, min_scale: float,
                   resize: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(images, labels) on `device` from a loader of (encoded bytes, labels)."""
    g = torch.Generator().manual_seed(seed)
    for blobs, labels in loader:
        images = decoder(blobs)
        views = [train_view(im, size, min_scale, g) if train else eval_view(im, size, resize) for im in images]
        yield _normalise(torch.stack(views)), labels.to(device, non_blocking=True)

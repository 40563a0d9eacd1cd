"""ImageNet-1k (ILSVRC 2012) in ImageFolder layout: ROOT/train/<wnid>/*.JPEG and ROOT/val/<wnid>/*.JPEG
(the validation images sorted into class folders, as torchvision's ImageFolder and MLPerf's reference
expect). Not on any registry: `trainbench data prepare imagenet --from ROOT` checks the layout and writes an
index of files and labels, so runs do not walk 1.3M files. Images are decoded with Pillow here, on the device
(imagenet_device.py) or by NVIDIA DALI (imagenet_dali.py): `data.decode`."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from suite.data.base import DataMissing
from suite.data.locate import find_dir, link_local, local_hint, named_dir
from suite.data.vision.imagenet_config import Config
from suite.registry import Component

if TYPE_CHECKING:  # torch is imported where a tensor is made: `data list` (locate) needs none
    import torch

EXTENSIONS = (".jpeg", ".jpg", ".png")
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
INDEX = "trainbench-index.json"


def scan(root: Path, split: str, classes: list[str] | None = None) -> tuple[list[str], list[tuple[str, int]]]:
    base = root / split
    found = sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    classes = classes or found
    if not classes:
        raise DataMissing(f"{base}: no class folders (expected {split}/<class>/<image>.JPEG)")
    lookup = {c: i for i, c in enumerate(classes)}
    items = []
    for c in found:
        if c not in lookup:
            raise DataMissing(f"{base}: class folder {c!r} is not a training class")
        for f in sorted((base / c).iterdir()):
            if f.suffix.lower() in EXTENSIONS:
                items.append((f"{split}/{c}/{f.name}", lookup[c]))
    if not items:
        raise DataMissing(f"{base}: no images ({', '.join(EXTENSIONS)})")
    return classes, items


def build_index(root: Path) -> dict[str, Any]:
    classes, train = scan(root, "train")
    _, val = scan(root, "val", classes)
    return {"classes": classes, "train": train, "val": val}


def locate(cfg: Config) -> Path:
    return find_dir("imagenet", [Path(cfg.path) if cfg.path else None, named_dir("imagenet")], ["train", "val"],
                    local_hint("imagenet"))


def read_index(root: Path) -> dict[str, Any]:
    for idx in (root / INDEX, named_dir("imagenet-index") / INDEX):
        if idx.exists():
            data = json.loads(idx.read_text())
            if data.get("root") == str(root.resolve()):
                return data
    return build_index(root)


@dataclass
class ImageFolderSplits:
    root: Path
    classes: list[str]
    train: list[tuple[str, int]]
    val: list[tuple[str, int]]
    cfg: Config
    meta: dict[str, Any] = field(default_factory=dict)


def load(cfg: Config) -> ImageFolderSplits:
    root = locate(cfg)
    idx = read_index(root)
    size = cfg.image_size
    return ImageFolderSplits(root, idx["classes"], [tuple(t) for t in idx["train"]][: cfg.train_limit],
                             [tuple(t) for t in idx["val"]][: cfg.val_limit], cfg,
                             meta={"input_shape": (3, size, size), "num_classes": len(idx["classes"]),
                                   "source": str(root)})


def prepare(source: Path | None) -> str:
    if source is None:
        raise DataMissing("ImageNet cannot be downloaded without an account (image-net.org): get ILSVRC2012, "
                          "sort val/ into class folders, then `trainbench data prepare imagenet --from ROOT`")
    root = locate(Config(path=str(source)))
    index = {**build_index(root), "root": str(root.resolve())}
    link_local("imagenet", root)
    target = root / INDEX
    try:
        target.write_text(json.dumps(index))
    except OSError:  # read-only copy
        target = named_dir("imagenet-index") / INDEX
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(index))
    return (f"imagenet: {root} ({len(index['classes'])} classes, {len(index['train'])} train, "
            f"{len(index['val'])} val images), index {target}")


# ---- decoding and augmentation (Pillow + numpy; torch's RNG so DataLoader workers are seeded) -----------


def _to_tensor(img: Any) -> torch.Tensor:
    import torch
    a = torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1).float() / 255.0
    return (a - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)


def random_resized_crop(img: Any, size: int, min_scale: float) -> Any:
    """torchvision's RandomResizedCrop: area in [min_scale, 1], log-uniform aspect in [3/4, 4/3]; fallback
    centre crop after 10 tries; then a horizontal flip with p=0.5."""
    import torch
    from PIL import Image

    w, h = img.size
    area = w * h
    for _ in range(10):
        target = area * float(torch.empty(1).uniform_(min_scale, 1.0))
        ratio = math.exp(float(torch.empty(1).uniform_(math.log(3 / 4), math.log(4 / 3))))
        cw, ch = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < cw <= w and 0 < ch <= h:
            x0 = int(torch.randint(0, w - cw + 1, (1,)))
            y0 = int(torch.randint(0, h - ch + 1, (1,)))
            break
    else:
        cw = ch = min(w, h)
        x0, y0 = (w - cw) // 2, (h - ch) // 2
    out = img.resize((size, size), Image.Resampling.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
    if float(torch.rand(1)) < 0.5:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return out


def center_crop(img: Any, size: int, resize: int) -> Any:
    from PIL import Image

    w, h = img.size
    scale = resize / min(w, h)
    img = img.resize((max(size, round(w * scale)), max(size, round(h * scale))), Image.Resampling.BILINEAR)
    w, h = img.size
    x0, y0 = (w - size) // 2, (h - size) // 2
    return img.crop((x0, y0, x0 + size, y0 + size))


class ImageDataset:  # map-style (__len__, __getitem__), all a DataLoader reads: the module imports no torch
    def __init__(self, splits: ImageFolderSplits, train: bool):
        self.root, self.cfg, self.train = splits.root, splits.cfg, train
        self.items = splits.train if train else splits.val

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        try:
            from PIL import Image
        except ImportError:
            raise DataMissing("decoding ImageNet needs Pillow: pip install 'trainbench-suite[cv]'") from None
        rel, label = self.items[i]
        with Image.open(self.root / rel) as im:
            img = im.convert("RGB")
        size = self.cfg.image_size
        if self.train:
            img = random_resized_crop(img, size, self.cfg.min_crop_scale)
        else:
            img = center_crop(img, size, self.cfg.eval_resize or round(size * 256 / 224))
        return _to_tensor(img), label


COMPONENT = Component(Config, load=load, prepare=prepare)

"""`data: {name: lora_text}`: the standard LoRA workload's data, a pretrained base and a second text to fine-tune
it on, both made here from real texts that install from registries (nothing is downloaded).

The base: a byte-level BPE tokenizer trained on Jane Austen's six novels, and a small Llama (the `base:` block)
pretrained on them with a fixed seed, saved as a Hugging Face folder (config.json, model.safetensors,
tokenizer.json) under $TRAINBENCH_DATA/bases/<recipe hash>/, with `base_eval.json` holding the base's own
validation loss on both texts. It is made once, by `trainbench data prepare lora_text` or by the first run that
needs it (untimed init), and reused: the folder name is a hash of the recipe and the texts.
The fine-tune text (CPython's pydoc topics) is tokenized with the base's tokenizer and split at a fixed offset.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from suite.data.locate import data_root
from suite.data.text import tokenizer as tk
from suite.data.text.lora_text_config import BaseRecipe, Config
from suite.data.text.streams import AustenConfig, TokenSplits, austen_text, locate_austen, pydoc_topics_text
from suite.registry import Component

RECIPE_VERSION = 1


def _split(ids: np.ndarray, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    cut = int(len(ids) * (1 - val_fraction))
    return ids[:cut], ids[cut:]


def _base_dir(recipe: BaseRecipe) -> Path:
    """The recipe's folder: the texts are fixed by their packages (janeaustenr, CPython), so the recipe and this
    module's RECIPE_VERSION name the base (reading Austen only to hash it costs seconds a run)."""
    digest = hashlib.sha256(json.dumps({"v": RECIPE_VERSION, "recipe": recipe.model_dump()},
                                       sort_keys=True).encode()).hexdigest()[:12]
    return data_root() / "bases" / f"austen_llama-{digest}"


def _val_loss(model: Any, ids: np.ndarray, seq_len: int, limit: int = 64) -> float:
    import torch
    import torch.nn.functional as F

    n = min((len(ids) - 1) // seq_len, limit)
    rows = torch.from_numpy(np.stack([ids[i * seq_len: i * seq_len + seq_len + 1] for i in range(n)]).astype(np.int64))
    model.eval()
    with torch.no_grad():
        logits = model(rows[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), rows[:, 1:].reshape(-1))
    model.train()
    return float(loss)


def pretrain_base(recipe: BaseRecipe, austen: str, finetune_text: str, folder: Path) -> dict[str, Any]:
    """Tokenizer + pretraining + save, into `folder` (written beside it and renamed: two runs may race)."""
    import torch
    import torch.nn.functional as F

    # layer: this data set's recipe is a pretrained base, made once (untimed) here: its weights as a HF folder
    from suite.models.hf import checkpoint as hf_checkpoint

    # layer: the base is the suite's Llama, pretrained on Austen (its config here, its model below)
    from suite.models.llama import config as llama_config

    # layer: the base is the suite's Llama, pretrained on Austen
    from suite.models.llama import model as llama

    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        text = austen[: recipe.limit_chars] if recipe.limit_chars else austen
        tok = tk.train_bpe(text.split("\n\n"), recipe.vocab_size, tmp / "tokenizer.json")
        ids = np.concatenate([np.asarray(x, dtype=np.int32) for x in tok.encode_batch(text.split("\n\n"))])
        train, val = _split(ids, 0.1)
        cfg = llama_config.Config(**recipe.model_fields_for_llama())
        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = llama.Llama(cfg, llama.vocab(cfg, {}))
            opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.01, betas=(0.9, 0.99))
            rng = np.random.default_rng(0)
            ar = np.arange(recipe.seq_len + 1)
            for step in range(recipe.steps):
                lr = recipe.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / recipe.steps)))
                for group in opt.param_groups:
                    group["lr"] = lr
                starts = rng.integers(0, len(train) - recipe.seq_len - 1, recipe.batch_size)
                rows = torch.from_numpy(train[starts[:, None] + ar].astype(np.int64))
                logits = model(rows[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        hf_checkpoint.save_llama(model, tmp)
        ft_ids = np.asarray(tok.encode(finetune_text), dtype=np.int32)
        report = {"recipe": recipe.model_dump(), "austen_val_loss": _val_loss(model, val, recipe.seq_len),
                  "pydoc_topics_val_loss": _val_loss(model, _split(ft_ids, 0.1)[1], recipe.seq_len),
                  "train_tokens": int(len(train)), "seconds": round(time.perf_counter() - t0, 1)}
        (tmp / "base_eval.json").write_text(json.dumps(report, indent=2) + "\n")
        try:
            os.rename(tmp, folder)
        except OSError:  # another run finished first: keep its folder
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report


def ensure_base(cfg: Config) -> Path:
    folder = _base_dir(cfg.base)
    if not (folder / "base_eval.json").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        austen = austen_text(locate_austen(AustenConfig(path=cfg.path)))
        pretrain_base(cfg.base, austen, pydoc_topics_text(), folder)
    return folder


def load(cfg: Config) -> TokenSplits:
    folder = ensure_base(cfg)
    tok = tk.load(folder / "tokenizer.json")
    text = pydoc_topics_text()
    if cfg.limit_chars:
        text = text[: cfg.limit_chars]
    ids = np.asarray(tok.encode(text), dtype=np.int16 if tok.vocab_size < 2**15 else np.int32)
    train, val = _split(ids, cfg.val_fraction)
    base_eval = json.loads((folder / "base_eval.json").read_text())
    return TokenSplits([train], [val], meta={
        "vocab_size": tok.vocab_size, "tokenizer": str(tok.path), "checkpoint": str(folder),
        "source": f"pydoc_data.topics tokenized with the Austen base's BPE ({folder})", "license": "PSF-2.0",
        "base_val_loss": base_eval["pydoc_topics_val_loss"]})


def prepare(source: Path | None) -> str:
    folder = ensure_base(Config(path=str(source) if source else None))
    report = json.loads((folder / "base_eval.json").read_text())
    return (f"lora_text: base at {folder} (Austen val loss {report['austen_val_loss']:.3f}, pydoc topics val loss "
            f"{report['pydoc_topics_val_loss']:.3f})")


COMPONENT = Component(Config, load=load, prepare=prepare)


def locate(cfg: Config) -> Path:
    """The base folder when it has been made (`trainbench data list`)."""
    from suite.data.base import DataMissing

    folder = _base_dir(cfg.base)
    if not (folder / "base_eval.json").is_file():
        raise DataMissing(f"the base {folder} is not made yet: `trainbench data prepare lora_text` (or the first "
                          "run) pretrains it")
    return folder

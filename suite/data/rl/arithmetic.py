"""Verifiable problems from a seeded generator, the environment of GRPO (as CartPole is PPO's): multi-digit
addition `123+045=` -> `168`, over a character vocabulary. Every problem a seed draws is the same on every
machine; the held-out evaluation problems (their own seed) are never drawn for training.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suite.data.rl.arithmetic_config import Config
from suite.registry import Component

PAD, EOS = "<pad>", "<eos>"
VOCAB: tuple[str, ...] = (PAD, EOS, *"0123456789", "+", "=")


@dataclass
class Problems:
    """The generator and its tokenizer. Prompts all have the same length (2 x digits + 2 tokens)."""

    cfg: Config
    held_out: set[tuple[int, int]]

    @property
    def vocab_size(self) -> int:
        return len(VOCAB)

    @property
    def pad_id(self) -> int:
        return VOCAB.index(PAD)

    @property
    def eos_id(self) -> int:
        return VOCAB.index(EOS)

    @property
    def prompt_len(self) -> int:
        return 2 * self.cfg.digits + 2

    @property
    def answer_len(self) -> int:
        """Tokens of the longest answer, its end-of-answer token included."""
        return self.cfg.digits + 2

    def save_hf_tokenizer(self, folder: Path) -> Path:
        return save_hf_tokenizer(folder)

    def token_id(self, text: str) -> int:
        if text not in VOCAB:
            raise ValueError(f"{text!r} is not one token of the arithmetic vocabulary ({', '.join(VOCAB)})")
        return VOCAB.index(text)

    def encode(self, text: str) -> list[int]:
        return [VOCAB.index(c) for c in text]

    def decode(self, ids: list[int] | torch.Tensor) -> str:
        """Characters up to (not including) the first end-of-answer or pad token."""
        out = []
        for i in ids.tolist() if isinstance(ids, torch.Tensor) else ids:
            if i in (self.eos_id, self.pad_id):
                break
            out.append(VOCAB[i])
        return "".join(out)

    def problem(self, a: int, b: int) -> tuple[str, str]:
        d = self.cfg.digits
        answer = str(a + b)
        return f"{a:0{d}d}+{b:0{d}d}=", answer[::-1] if self.cfg.reverse_answer else answer

    def draw(self, rng: np.random.Generator, n: int, exclude: set[tuple[int, int]] | None = None
             ) -> list[tuple[str, str]]:
        """n problems from rng, none of `exclude` (default: the held-out ones)."""
        exclude = self.held_out if exclude is None else exclude
        top = 10**self.cfg.digits
        out: list[tuple[str, str]] = []
        while len(out) < n:
            a, b = (int(x) for x in rng.integers(0, top, size=2))
            if (a, b) not in exclude:
                out.append(self.problem(a, b))
        return out

    def eval_set(self) -> list[tuple[str, str]]:
        return [self.problem(a, b) for a, b in sorted(self.held_out)]

    def prompts(self, problems: list[tuple[str, str]]) -> torch.Tensor:
        return torch.tensor([self.encode(p) for p, _ in problems], dtype=torch.long)

    def solved(self, problems: list[tuple[str, str]]) -> torch.Tensor:
        """(n, prompt_len + answer_len) token rows of prompt, answer, end-of-answer, padding: supervised data."""
        rows = [self.encode(p + a) + [self.eos_id] for p, a in problems]
        width = self.prompt_len + self.answer_len
        return torch.tensor([r + [self.pad_id] * (width - len(r)) for r in rows], dtype=torch.long)


def save_hf_tokenizer(folder: Path) -> Path:
    """This vocabulary as a Hugging Face tokenizer (tokenizer.json, one token a character, `<pad>` / `<eos>` special)
    with a chat template that is the user's text alone, so that a framework that applies chat templates (veRL's RL
    dataset) gives the model the very prompt the suite's own GRPO gives it. AutoTokenizer reads the folder."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # characters joined as they are, no spaces between
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS,
                                   chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}")
    fast.save_pretrained(str(folder))
    return folder


def load(cfg: Config) -> Problems:
    top = 10**cfg.digits
    if cfg.eval_problems > top * top // 2:
        raise ValueError(f"data.eval_problems {cfg.eval_problems} is more than half of the {top * top} problems "
                         f"of {cfg.digits}-digit addition: too few would be left to train on")
    rng = np.random.default_rng(cfg.eval_seed)
    held: set[tuple[int, int]] = set()
    while len(held) < cfg.eval_problems:
        a, b = (int(x) for x in rng.integers(0, top, size=2))
        held.add((a, b))
    return Problems(cfg, held)


def meta(problems: Problems) -> dict[str, Any]:
    return {"vocab_size": problems.vocab_size, "prompt_len": problems.prompt_len, "answer_len": problems.answer_len}


COMPONENT = Component(Config, load=load)

"""Tokenizers from a local `tokenizer.json` (Hugging Face `tokenizers`; Llama 2 / Llama 3 ship one), the check that
a tokenizer and a model agree on the vocabulary, and the prompt templates recipes format their samples with.

Nothing is downloaded: the file is a path in the spec (or beside a checkpoint). A missing or unreadable file, or a
vocabulary other than the model's, is a `DataMissing` (bad input: exit 2, nothing recorded).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.data.base import DataMissing

# the recipes' sample formats. govreport_summary: the MLPerf llama2_70b_lora reference's (mlcommons/training
# llama2_70b_lora/scripts/utils.py, create_datasets / tokenize_function); its loss is on the summary (and the eos)
PROMPT_TEMPLATES: dict[str, tuple[str, str]] = {
    # name -> (prompt, completion): the loss is taken on the completion's tokens only
    "govreport_summary": ("### Summarize the following text:\n {input}\n ### Summary:\n", " {output}{eos}"),
    "plain": ("{input}", "{output}{eos}"),
}


class TokenizerError(DataMissing):
    """A tokenizer file that is missing, unreadable, or does not fit the model."""


@dataclass
class Tokenizer:
    path: Path
    inner: Any  # tokenizers.Tokenizer

    @property
    def vocab_size(self) -> int:
        """Every id the tokenizer can produce: the model's vocabulary must hold them all (special tokens too)."""
        return int(self.inner.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, special: bool = False) -> list[int]:
        return list(self.inner.encode(text, add_special_tokens=special).ids)

    def encode_batch(self, texts: Iterable[str], special: bool = False) -> list[list[int]]:
        return [list(e.ids) for e in self.inner.encode_batch(list(texts), add_special_tokens=special)]

    def decode(self, ids: Iterable[int]) -> str:
        return str(self.inner.decode(list(ids), skip_special_tokens=False))

    def token_id(self, token: str) -> int:
        tid = self.inner.token_to_id(token)
        if tid is None:
            raise TokenizerError(f"{self.path}: token {token!r} is not in the vocabulary")
        return int(tid)


def load(path: str | Path) -> Tokenizer:
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise TokenizerError(f"tokenizer file {path} does not exist: give the path of a tokenizer.json (Llama 2 and "
                             "Llama 3 checkpoints ship one beside config.json)")
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        raise TokenizerError("reading tokenizer.json needs the `tokenizers` package: pip install "
                             "'trainbench-suite[finetune]'") from None
    try:
        inner = HFTokenizer.from_file(str(path))
    except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception for a malformed file
        raise TokenizerError(f"{path}: not a tokenizer.json the `tokenizers` package reads ({e})") from None
    return Tokenizer(path, inner)


def check_vocab(tok: Tokenizer, model_vocab: int, model_source: str, padded: bool = False) -> None:
    """The model's embedding rows must be the tokenizer's ids: a different size means another vocabulary (a
    Llama 3 tokenizer with a Llama 2 model). padded: a model vocabulary rounded up past the tokenizer's is allowed."""
    if tok.vocab_size == model_vocab or (padded and model_vocab > tok.vocab_size):
        return
    raise TokenizerError(f"tokenizer {tok.path} has {tok.vocab_size} tokens but the model ({model_source}) has a "
                         f"vocabulary of {model_vocab}: they are not the same vocabulary; use the tokenizer.json "
                         "that came with the checkpoint")


def template(name: str) -> tuple[str, str]:
    if name not in PROMPT_TEMPLATES:
        raise TokenizerError(f"prompt template {name!r} is unknown; known: {', '.join(PROMPT_TEMPLATES)}")
    return PROMPT_TEMPLATES[name]


def format_sample(name: str, input_text: str, output_text: str, eos: str = "") -> tuple[str, str]:
    """(prompt, completion) of one sample in a recipe's template; the prompt is masked out of the loss."""
    prompt, completion = template(name)
    return prompt.format(input=input_text), completion.format(output=output_text, eos=eos)


def tokenize_sample(tok: Tokenizer, name: str, input_text: str, output_text: str,
                    eos: str = "") -> tuple[list[int], list[int]]:
    """(input_ids, labels) with the prompt's labels -100, as the MLPerf reference masks its validation samples
    (it tokenizes the prompt alone and masks that many leading tokens)."""
    prompt, completion = format_sample(name, input_text, output_text, eos)
    ids = tok.encode(prompt + completion)
    n_prompt = len(tok.encode(prompt))
    return ids, [-100] * n_prompt + ids[n_prompt:]


def train_bpe(texts: Iterable[str], vocab_size: int, path: str | Path,
              special_tokens: tuple[str, ...] = ("<s>", "</s>")) -> Tokenizer:
    """A byte-level BPE tokenizer trained on `texts` and written as tokenizer.json (the standard workload's
    fixture, and the tests' small tokenizers). Deterministic for the same texts and settings."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    inner = HFTokenizer(models.BPE())
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    inner.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    inner.train_from_iterator(texts, trainer=trainer)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    inner.save(str(path))
    return Tokenizer(path, inner)

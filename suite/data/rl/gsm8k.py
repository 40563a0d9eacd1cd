"""GSM8K (grade-school math, 7,473 train / 1,319 test problems; MIT) for GRPO, read from a local folder in either
layout: veRL's preprocessed parquet (`train.parquet`, `test.parquet` as verl examples/data_preprocess/gsm8k.py
writes them: data_source, prompt = chat messages, ability, reward_model {style, ground_truth}, extra_info) or the
original release (`train.jsonl`, `test.jsonl` of openai/grade-school-math: question, answer ending '#### N').

Prompts are built as veRL builds them: the question plus veRL's instruction (`Let's think step by step and output
the final answer after "####".`) as one user message, rendered with the checkpoint's chat template
(tokenizer_config.json, suite/data/text/chat_template.py; add_generation_prompt) and tokenized without added special
tokens (verl/utils/dataset/rl_dataset.py). Prompts longer than `max_prompt_length` are dropped, as veRL's
`filter_overlong_prompts`. Prompts vary in length: a batch is left-padded, with its mask (the decoder masks the
padding, suite/models/llama/model.py). The reward is veRL's gsm8k compute_score (suite/algorithms/grpo_rewards.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from suite.data.base import DataMissing
from suite.data.locate import data_root, link_local, named_dir
from suite.data.rl.gsm8k_config import Config
from suite.registry import Component

if TYPE_CHECKING:  # torch is imported where a tensor is made: `data list` (locate) needs none
    import torch

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
LAYOUTS = {"verl": ("train.parquet", "test.parquet"), "jsonl": ("train.jsonl", "test.jsonl")}
DATA_SOURCE = "openai/gsm8k"


def _under_root(path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else data_root() / p


def locate(cfg: Config) -> Path:
    return locate_layout(cfg)[0]


def locate_layout(cfg: Config) -> tuple[Path, str]:
    folder = _under_root(cfg.path) if cfg.path else named_dir("gsm8k")
    for layout, files in LAYOUTS.items():
        if all((folder / f).is_file() for f in files):
            return folder, layout
    raise DataMissing(f"data set 'gsm8k' not found in {folder}: it needs train.parquet + test.parquet (veRL's "
                      "examples/data_preprocess/gsm8k.py) or train.jsonl + test.jsonl (openai/grade-school-math "
                      "grade_school_math/data); give data.path, or `trainbench data prepare gsm8k --from PATH` (or "
                      "`--synthetic`: the tiny variant's stand-in under gsm8k-tiny/)")


def answer_of(solution: str) -> str | None:
    """The reference answer of an original GSM8K solution: the number after '#### ', commas removed (veRL's
    preprocessing, extract_solution)."""
    import re

    m = re.search("#### (\\-?[0-9\\.\\,]+)", solution)
    return None if m is None else m.group(1).replace(",", "")


def verl_record(row: dict[str, str], split: str, index: int) -> dict[str, Any]:
    """One original GSM8K row as veRL's examples/data_preprocess/gsm8k.py writes it (its process_fn)."""
    answer = answer_of(row["answer"])
    if answer is None:
        raise DataMissing(f"GSM8K {split} row {index}: the answer has no final '#### N' line")
    return {"data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": row["question"] + " " + INSTRUCTION}],
            "ability": "math", "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": index, "answer": row["answer"], "question": row["question"]}}


def verl_files(cfg: Config, out_dir: Path) -> tuple[Path, Path]:
    """(train, test) parquet in veRL's RL layout for its trainer (data.train_files / val_files): the folder's own
    files when they are veRL's, else the jsonl converted as veRL's preprocessing converts it, written to out_dir."""
    folder, layout = locate_layout(cfg)
    if layout == "verl":
        return folder / LAYOUTS["verl"][0], folder / LAYOUTS["verl"][1]
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for split, name in zip(("train", "test"), LAYOUTS["jsonl"], strict=True):
        read_jsonl(folder / name)  # every line checked, named by file and line
        rows = [json.loads(line) for line in (folder / name).read_text(encoding="utf-8").splitlines() if line.strip()]
        path = out_dir / f"{split}.parquet"
        pq.write_table(pa.Table.from_pylist([verl_record(r, split, i) for i, r in enumerate(rows)]), path)
        out.append(path)
    return out[0], out[1]


def read_jsonl(path: Path) -> list[tuple[list[dict[str, str]], str]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataMissing(f"{path}: line {n} is not JSON ({e})") from None
            if not isinstance(row, dict) or not isinstance(row.get("question"), str) \
                    or not isinstance(row.get("answer"), str):
                raise DataMissing(f"{path}: line {n} has no string `question` and `answer` (GSM8K's fields)")
            answer = answer_of(row["answer"])
            if answer is None:
                raise DataMissing(f"{path}: line {n}: the answer has no final '#### N' line")
            rows.append(([{"role": "user", "content": row["question"] + " " + INSTRUCTION}], answer))
    return rows


def read_parquet(path: Path) -> list[tuple[list[dict[str, str]], str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataMissing("reading veRL's parquet files needs `pyarrow`: pip install pyarrow") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError for a damaged file
        raise DataMissing(f"{path}: not a readable parquet file ({e})") from None
    for column in ("prompt", "reward_model"):
        if column not in table.column_names:
            raise DataMissing(f"{path}: no `{column}` column (has {table.column_names}); expected veRL's RL "
                              "layout (data_source, prompt, ability, reward_model, extra_info)")
    rows = []
    for i, (prompt, reward) in enumerate(zip(table.column("prompt").to_pylist(),
                                             table.column("reward_model").to_pylist(), strict=True)):
        if not isinstance(prompt, list) or not prompt or not all(
                isinstance(m, dict) and isinstance(m.get("content"), str) and m.get("role") for m in prompt):
            raise DataMissing(f"{path}: row {i}: column `prompt` must be a list of chat messages {{role, content}}")
        truth = reward.get("ground_truth") if isinstance(reward, dict) else None
        if not isinstance(truth, str):
            raise DataMissing(f"{path}: row {i}: column `reward_model` has no string ground_truth")
        rows.append(([{"role": m["role"], "content": m["content"]} for m in prompt], truth))
    return rows


@dataclass
class Problems:
    """The tokenized problems: (prompt ids, reference answer). draw() walks the training set in shuffled epochs
    (veRL's sampler reshuffles each epoch)."""

    train: list[tuple[list[int], str]]
    test: list[tuple[list[int], str]]
    tok: Any  # suite.data.text.tokenizer.Tokenizer
    pad_id: int
    stop_ids: list[int]
    max_prompt_length: int
    dropped: int = 0
    source: str = ""
    _order: list[int] = field(default_factory=list)
    # the built-in reward that grades a completion (suite/algorithms/grpo_rewards.py: veRL's strict `#### N` rule);
    # the GRPO workload looks it up, so that data imports no algorithm
    grader: ClassVar[str] = "gsm8k"

    @property
    def vocab_size(self) -> int:
        return self.tok.vocab_size

    @property
    def eos_id(self) -> int:
        return self.stop_ids[0]

    @property
    def prompt_len(self) -> int:
        """The longest prompt a batch can hold (its context budget): batches are left-padded to their own longest."""
        return self.max_prompt_length

    @property
    def typical_prompt_len(self) -> int:
        """The training prompts' mean length: what a sample's FLOPs count (prompt_len is only the cap)."""
        return round(sum(len(ids) for ids, _ in self.train) / len(self.train))

    @property
    def train_size(self) -> int:
        return len(self.train)

    def meta(self) -> dict[str, Any]:
        # an embedding padded past the tokenizer (Qwen2's 152064 rows for 151665 tokens) is the same vocabulary
        return {"vocab_size": self.vocab_size, "vocab_padded": True, "tokenizer": str(self.tok.path),
                "source": self.source}

    def token_id(self, text: str) -> int:
        return self.tok.token_id(text)

    def decode(self, ids: list[int] | torch.Tensor) -> str:
        """The completion's text up to (not including) its first stop or pad token, special tokens skipped (veRL
        decodes the response with skip_special_tokens=True)."""
        import torch
        out = []
        for i in ids.tolist() if isinstance(ids, torch.Tensor) else ids:
            if i in self.stop_ids or i == self.pad_id:
                break
            out.append(i)
        return str(self.tok.inner.decode(out, skip_special_tokens=True))

    def draw(self, rng: np.random.Generator, n: int) -> list[tuple[list[int], str]]:
        out = []
        while len(out) < n:
            if not self._order:
                self._order = [int(i) for i in rng.permutation(len(self.train))]
            out.append(self.train[self._order.pop()])
        return out

    def eval_set(self) -> list[tuple[list[int], str]]:
        return self.test

    def prompts(self, problems: list[tuple[list[int], str]]) -> torch.Tensor:
        import torch
        width = max(len(ids) for ids, _ in problems)
        return torch.tensor([[self.pad_id] * (width - len(ids)) + ids for ids, _ in problems], dtype=torch.long)

    def prompt_mask(self, problems: list[tuple[list[int], str]]) -> torch.Tensor:
        import torch
        width = max(len(ids) for ids, _ in problems)
        return torch.tensor([[False] * (width - len(ids)) + [True] * len(ids) for ids, _ in problems])


def _special_ids(folder: Path, tok: Any, tcfg: dict[str, Any]) -> tuple[int, list[int]]:
    """(pad id, stop ids): generation_config.json's eos_token_id (one id or a list: Qwen2.5 Instruct stops at
    <|im_end|> and <|endoftext|>, as vLLM does in veRL's rollout), else tokenizer_config.json's eos_token."""
    from suite.data.text.chat_template import _token_text

    stops: list[int] = []
    gen = folder / "generation_config.json"
    if gen.is_file():
        try:
            eos = json.loads(gen.read_text(encoding="utf-8")).get("eos_token_id")
        except json.JSONDecodeError as e:
            raise DataMissing(f"{gen} is not valid JSON ({e})") from None
        stops = [int(x) for x in (eos if isinstance(eos, list) else [eos] if eos is not None else [])]
    if not stops:
        eos_text = _token_text(tcfg.get("eos_token"))
        if not eos_text:
            raise DataMissing(f"{folder}: neither generation_config.json's eos_token_id nor tokenizer_config.json's "
                              "eos_token names the token that ends a completion")
        stops = [tok.token_id(eos_text)]
    pad_text = _token_text(tcfg.get("pad_token"))
    return (tok.token_id(pad_text) if pad_text else stops[0]), stops


def load(cfg: Config) -> Problems:
    from suite.data.text import tokenizer as tokenizer_mod
    from suite.data.text.chat_template import ChatTemplate, read_config

    folder, layout = locate_layout(cfg)
    if cfg.tokenizer is None:
        raise DataMissing("data.tokenizer is not set: give the policy's model folder (its tokenizer.json, "
                          "tokenizer_config.json and generation_config.json tokenize and stop the prompts)")
    model_dir = _under_root(cfg.tokenizer)
    tok = tokenizer_mod.load(model_dir)
    template = ChatTemplate(model_dir) if cfg.chat_template else None
    tcfg = template.config if template else (read_config(model_dir) if (model_dir / "tokenizer_config.json")
                                              .is_file() else {})
    pad_id, stops = _special_ids(model_dir, tok, tcfg)
    read = read_parquet if layout == "verl" else read_jsonl
    dropped = 0

    def tokenized(path: Path, limit: int | None) -> list[tuple[list[int], str]]:
        nonlocal dropped
        out = []
        rows = read(path)
        texts = [template.render(m) if template else "\n".join(x["content"] for x in m) for m, _ in rows]
        for ids, (_, answer) in zip(tok.encode_batch(texts), rows, strict=True):
            if len(ids) > cfg.max_prompt_length:
                dropped += 1
                continue
            out.append((ids, answer))
            if limit and len(out) == limit:
                break
        if not out:
            raise DataMissing(f"{path}: no problem fits data.max_prompt_length {cfg.max_prompt_length} tokens")
        return out

    train = tokenized(folder / LAYOUTS[layout][0], cfg.max_train_problems)
    test = tokenized(folder / LAYOUTS[layout][1], cfg.eval_problems)
    return Problems(train, test, tok, pad_id, stops, cfg.max_prompt_length, dropped,
                    source=f"GSM8K ({layout} layout, {folder})")


def prepare(source: Path | None) -> str:
    if source is None:
        raise DataMissing("gsm8k: give --from PATH, a folder with veRL's train/test.parquet or GSM8K's train/test.jsonl")
    folder, layout = locate_layout(Config(path=str(Path(source).expanduser().resolve())))
    link_local("gsm8k", folder)
    return f"gsm8k: {folder} ({layout} layout) linked as {named_dir('gsm8k')}"


COMPONENT = Component(Config, load=load, prepare=prepare)

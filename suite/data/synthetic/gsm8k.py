"""A tiny stand-in of the rl/gsm8k_grpo recipe's files, in their real formats, for the tiny variant (tests and
benchmarks/device_check.py): GSM8K-format problems as veRL's parquet (or the original jsonl), and a Qwen2
model folder (config.json + model.safetensors of random weights, a byte-level BPE tokenizer.json trained on the
problems with Qwen's special tokens, tokenizer_config.json with a ChatML chat template as Qwen2's,
generation_config.json with its two stop ids). `write(root)` fills root/data and root/model. A model folder is a
model's files: this writer sits with the synthetic generator, above both the readers and the models.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# ChatML as Qwen2's template renders one user turn (a default system message when none is given)
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# the tiny variant's model block (workloads/rl/gsm8k_grpo.yaml) declares this shape
SHAPE: dict[str, Any] = {"n_layer": 2, "d_model": 64, "n_head": 4, "n_kv_head": 2, "ffn_dim": 128, "vocab_size": 384,
                         "rope_theta": 1000000.0, "norm_eps": 1e-6, "qkv_bias": True, "tie_embeddings": True}
TOKENIZER_VOCAB = 320  # below the model's 384 rows: a padded embedding, as Qwen2's


def problems(n: int, offset: int = 0) -> list[dict[str, str]]:
    """n GSM8K-format rows (question; answer with its worked steps and the final '#### N')."""
    out = []
    for i in range(offset, offset + n):
        a, b, c = 3 + i % 7, 2 + (i * 5) % 9, 1 + (i * 3) % 4
        total = a * c + b
        who = ("Sam", "Maria Elena", "Bo Li Wei")[i % 3]  # prompts of a few lengths: batches are left-padded
        out.append({"question": f"{who} buys {c} bags of {a} apples and finds {b} more apples. How many "
                                f"apples does {who} have?",
                    "answer": f"The bags hold {c}*{a}=<<{c}*{a}={a * c}>>{a * c} apples.\n"
                              f"Sam has {a * c}+{b}=<<{a * c}+{b}={total}>>{total} apples.\n#### {total}"})
    return out


def write_data(folder: Path, train: int = 24, test: int = 8, layout: str = "verl") -> Path:
    from suite.data.rl.gsm8k import DATA_SOURCE, INSTRUCTION, answer_of

    folder.mkdir(parents=True, exist_ok=True)
    splits = {"train": problems(train), "test": problems(test, offset=1000)}
    for split, rows in splits.items():
        if layout == "jsonl":
            (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
            continue
        import pyarrow as pa
        import pyarrow.parquet as pq

        records = [{"data_source": DATA_SOURCE,  # spelled out, as veRL's process_fn writes a row
                    "prompt": [{"role": "user", "content": r["question"] + " " + INSTRUCTION}], "ability": "math",
                    "reward_model": {"style": "rule", "ground_truth": answer_of(r["answer"])},
                    "extra_info": {"split": split, "index": i, "answer": r["answer"], "question": r["question"]}}
                   for i, r in enumerate(rows)]
        pq.write_table(pa.Table.from_pylist(records), folder / f"{split}.parquet")
    return folder


# Qwen2's pre-tokenizer split (its tokenizer.json; transformers' Qwen2Tokenizer PRETOKENIZE_REGEX): digits one by one
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
               r"""\s*[\r\n]+|\s+(?!\S)|\s+""")


def _qwen2_style_bpe(texts: list[str], folder: Path) -> Any:
    """A byte-level BPE laid out as Qwen2's tokenizer.json is (its regex split, then byte-level without a regex)."""
    from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
    from tokenizers import Tokenizer as HFTokenizer

    from suite.data.text.tokenizer import Tokenizer

    inner = HFTokenizer(models.BPE())
    inner.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    inner.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, special_tokens=list(SPECIALS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    inner.train_from_iterator(texts, trainer=trainer)
    inner.save(str(folder / "tokenizer.json"))
    return Tokenizer(folder / "tokenizer.json", inner)


def write_model(folder: Path, seed: int = 0) -> Path:
    import torch

    from suite.data.rl.gsm8k import INSTRUCTION
    from suite.models.hf import checkpoint as hf_checkpoint
    from suite.models.llama import config as llama_config
    from suite.models.llama import model as llama

    folder.mkdir(parents=True, exist_ok=True)
    texts = [r["question"] + " " + INSTRUCTION + "\n" + r["answer"] for r in problems(64)]
    tok = _qwen2_style_bpe(texts * 4 + ["system user assistant You are a helpful assistant."], folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "chat_template": CHAT_TEMPLATE, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "bos_token": None, "model_max_length": 4096, "add_prefix_space": False,
        "clean_up_tokenization_spaces": False}, indent=2), encoding="utf-8")
    (folder / "generation_config.json").write_text(json.dumps({
        "eos_token_id": [tok.token_id("<|im_end|>"), tok.token_id("<|endoftext|>")],
        "pad_token_id": tok.token_id("<|endoftext|>")}), encoding="utf-8")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = llama.build(llama_config.Config(**SHAPE, seq_len=512, init_std=0.2), {})
    hf_checkpoint.save_llama(model, folder)
    return folder


def write(root: str | Path, layout: str = "verl") -> Path:
    root = Path(root)
    write_data(root / "data", layout=layout)
    write_model(root / "model")
    return root

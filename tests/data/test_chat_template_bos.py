"""A chat template that writes `{{ bos_token }}` renders the checkpoint's BOS token, as transformers'
`apply_chat_template` renders it (issue 50 item 16). The other tokenizer fixture (suite/data/synthetic/gsm8k.py) is
Qwen2-style, without a BOS, so nothing else pins this: here a Llama-3-style folder (a byte-level BPE with Llama 3's
special tokens, `bos_token` written as an AddedToken dict as Llama 2's tokenizer_config.json writes it) is checked
against transformers on the same files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.promised import require

from suite.data.text.chat_template import ChatTemplate

# Meta-Llama-3-8B-Instruct's tokenizer_config.json `chat_template` (as published on the Hugging Face hub; the BOS
# goes in front of the first message through `bos_token`)
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
CONVERSATIONS = [
    [{"role": "user", "content": "What is 7 times 6?"}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "  Name a prime.  "},
     {"role": "assistant", "content": "Seven."}, {"role": "user", "content": "Another?"}],
]


def _added(content: str) -> dict[str, object]:
    """A special token as Llama 2's tokenizer_config.json writes it (an AddedToken, not a plain string)."""
    return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False}


@pytest.fixture(scope="module")
def llama3_folder(tmp_path_factory) -> Path:
    require("tokenizers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder = tmp_path_factory.mktemp("llama3-style")
    inner = Tokenizer(models.BPE())
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    inner.decoder = decoders.ByteLevel()
    texts = [m["content"] for c in CONVERSATIONS for m in c] * 8 + ["system user assistant"] * 8
    inner.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    inner.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": _added("<|begin_of_text|>"),
        "eos_token": _added("<|eot_id|>"), "chat_template": LLAMA3_TEMPLATE, "model_max_length": 8192,
        "clean_up_tokenization_spaces": True}), encoding="utf-8")
    return folder


@pytest.mark.parametrize("generation_prompt", [True, False])
def test_bos_token_renders_as_transformers_renders_it(llama3_folder, generation_prompt):
    require("transformers")
    from transformers import AutoTokenizer

    from suite.data.text import tokenizer as tokenizer_mod

    theirs = AutoTokenizer.from_pretrained(llama3_folder)
    assert theirs.bos_token == "<|begin_of_text|>"
    ours, tok = ChatTemplate(llama3_folder), tokenizer_mod.load(llama3_folder)
    for messages in CONVERSATIONS:
        want = theirs.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)
        got = ours.render(messages, add_generation_prompt=generation_prompt)
        assert got == want
        assert got.startswith("<|begin_of_text|><|start_header_id|>") and got.count("<|begin_of_text|>") == 1
        ids = tok.encode(got)
        assert ids == theirs(want, add_special_tokens=False)["input_ids"]
        assert ids[0] == theirs.bos_token_id

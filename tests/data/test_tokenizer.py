"""Tokenizers from a local tokenizer.json (suite/data/text/tokenizer.py) against transformers' own reading of the same
file, the vocabulary check, and the MLPerf llama2_70b_lora prompt template with its loss mask."""

from __future__ import annotations

import pytest
from support.promised import require

from suite.data.base import DataMissing
from suite.data.text import tokenizer as tk
from suite.data.text.streams import pydoc_topics_text


@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> tk.Tokenizer:
    text = pydoc_topics_text()[:200_000]
    return tk.train_bpe(text.split("\n\n"), 400, tmp_path_factory.mktemp("tok") / "tokenizer.json")


def test_trained_file_reads_back_and_matches_transformers(bpe):
    require("transformers")
    from transformers import PreTrainedTokenizerFast

    tok = tk.load(bpe.path.parent)  # a folder: its tokenizer.json
    assert tok.vocab_size == 400
    sample = "The `with` statement wraps a block:\n    with open(path) as f:  # résumé"
    ids = tok.encode(sample)
    assert tok.decode(ids) == sample  # byte-level: every string round-trips
    assert len(ids) < len(sample.encode()) / 1.5  # merges were learned
    theirs = PreTrainedTokenizerFast(tokenizer_file=str(bpe.path))
    assert theirs(sample, add_special_tokens=False)["input_ids"] == ids
    assert tok.token_id("</s>") == theirs.convert_tokens_to_ids("</s>")
    # deterministic: the same texts train the same file
    again = tk.train_bpe(pydoc_topics_text()[:200_000].split("\n\n"), 400, bpe.path.parent / "again.json")
    assert again.path.read_text() == bpe.path.read_text()


def test_vocabulary_other_than_the_models_is_refused_naming_both(bpe):
    tk.check_vocab(bpe, 400, "checkpoint /m")
    tk.check_vocab(bpe, 512, "checkpoint /m", padded=True)
    with pytest.raises(DataMissing, match=rf"tokenizer {bpe.path} has 400 tokens but the model \(checkpoint /m\) "
                                          r"has a vocabulary of 32000"):
        tk.check_vocab(bpe, 32000, "checkpoint /m")
    with pytest.raises(DataMissing, match="has a vocabulary of 512"):
        tk.check_vocab(bpe, 512, "checkpoint /m")


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(DataMissing, match="tokenizer.json does not exist"):
        tk.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"model": 3}')
    with pytest.raises(DataMissing, match="not a tokenizer.json"):
        tk.load(tmp_path / "tokenizer.json")


def test_govreport_template_masks_the_prompt(bpe):
    """The MLPerf reference's format: "### Summarize the following text:\\n {input}\\n ### Summary:\\n {output}</s>",
    labels -100 over the prompt's tokens."""
    prompt, completion = tk.format_sample("govreport_summary", "The report.", "A summary.", "</s>")
    assert prompt + completion == "### Summarize the following text:\n The report.\n ### Summary:\n A summary.</s>"
    ids, labels = tk.tokenize_sample(bpe, "govreport_summary", "The report.", "A summary.", "</s>")
    n_prompt = len(bpe.encode(prompt))
    assert labels[:n_prompt] == [-100] * n_prompt and labels[n_prompt:] == ids[n_prompt:]
    assert ids[-1] == bpe.token_id("</s>")
    with pytest.raises(DataMissing, match="prompt template 'chat' is unknown"):
        tk.template("chat")

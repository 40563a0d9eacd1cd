"""GSM8K for GRPO (suite/data/rl/gsm8k.py): both on-disk layouts (veRL's parquet, the original jsonl) read from files
the fixture writes in those formats; the prompt rendered through the checkpoint's chat template exactly as
transformers' apply_chat_template renders it; bad files refused naming file and field; the gsm8k reward scored as
veRL's own compute_score scores it."""

from __future__ import annotations

import json

import pytest
from support.promised import require

from suite.algorithms import grpo_rewards
from suite.data.base import DataMissing
from suite.data.rl import gsm8k
from suite.data.synthetic import gsm8k as fixture


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return fixture.write_model(tmp_path_factory.mktemp("qwen2-tiny"))


def _load(folder, model_dir, **kw):
    return gsm8k.load(gsm8k.Config(path=str(folder), tokenizer=str(model_dir), max_prompt_length=256, **kw))


def test_prompts_are_the_chat_template_as_transformers_renders_it(tmp_path, model_dir):
    require("transformers")
    from transformers import AutoTokenizer

    problems = _load(fixture.write_data(tmp_path), model_dir)
    theirs = AutoTokenizer.from_pretrained(model_dir)
    rows = fixture.problems(24)
    for (ids, answer), row in zip(problems.train, rows, strict=True):
        messages = [{"role": "user", "content": row["question"] + " " + gsm8k.INSTRUCTION}]
        text = theirs.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert text.endswith("<|im_start|>assistant\n") and "You are a helpful assistant." in text
        assert ids == theirs(text, add_special_tokens=False)["input_ids"]  # veRL's rl_dataset tokenization
        assert answer == row["answer"].rsplit("#### ", 1)[1]
    assert problems.stop_ids == [theirs.convert_tokens_to_ids("<|im_end|>"), theirs.convert_tokens_to_ids(
        "<|endoftext|>")] and problems.pad_id == theirs.pad_token_id
    assert len({len(ids) for ids, _ in problems.train}) > 1  # prompts of several lengths: padding is exercised


def test_parquet_and_jsonl_layouts_give_the_same_problems_and_long_prompts_are_dropped(tmp_path, model_dir):
    verl = _load(fixture.write_data(tmp_path / "verl"), model_dir)
    original = _load(fixture.write_data(tmp_path / "jsonl", layout="jsonl"), model_dir)
    assert verl.train == original.train and verl.test == original.test and len(verl.test) == 8
    shortest = min(len(ids) for ids, _ in verl.train)
    cut = gsm8k.load(gsm8k.Config(path=str(tmp_path / "verl"), tokenizer=str(model_dir),
                                  max_prompt_length=shortest))
    assert 0 < len(cut.train) < len(verl.train) and cut.dropped >= len(verl.train) - len(cut.train)
    batch = verl.train[:3]
    prompts, mask = verl.prompts(batch), verl.prompt_mask(batch)
    assert prompts.shape == mask.shape and (prompts[~mask] == verl.pad_id).all()  # left padding
    assert [prompts[i][mask[i]].tolist() for i in range(3)] == [ids for ids, _ in batch]


def test_jsonl_converted_for_verl_is_the_parquet_verls_preprocessing_writes(tmp_path, model_dir):
    import pyarrow.parquet as pq

    verl = fixture.write_data(tmp_path / "verl")
    lines = fixture.write_data(tmp_path / "jsonl", layout="jsonl")
    same = gsm8k.verl_files(gsm8k.Config(path=str(verl)), tmp_path / "unused")
    assert same == (verl / "train.parquet", verl / "test.parquet") and not (tmp_path / "unused").exists()
    converted = gsm8k.verl_files(gsm8k.Config(path=str(lines)), tmp_path / "out")
    for ours, theirs in zip(converted, same, strict=True):
        assert pq.read_table(ours).to_pylist() == pq.read_table(theirs).to_pylist()


def test_bad_files_are_refused_naming_the_file_and_the_field(tmp_path, model_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pytest.raises(DataMissing, match="train.parquet \\+ test.parquet"):
        _load(tmp_path / "nowhere", model_dir)
    folder = fixture.write_data(tmp_path / "p")
    pq.write_table(pa.Table.from_pylist([{"data_source": "x", "question": "q"}]), folder / "train.parquet")
    with pytest.raises(DataMissing, match="train.parquet: no `prompt` column"):
        _load(folder, model_dir)
    lines = fixture.write_data(tmp_path / "j", layout="jsonl")
    (lines / "test.jsonl").write_text(json.dumps({"question": "q", "answer": "no final line"}) + "\n")
    with pytest.raises(DataMissing, match="test.jsonl: line 1: the answer has no final '#### N'"):
        _load(lines, model_dir)
    (lines / "test.jsonl").write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(DataMissing, match="test.jsonl: line 1 has no string `question` and `answer`"):
        _load(lines, model_dir)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    with pytest.raises(DataMissing, match="tokenizer_config.json is missing"):
        _load(folder, bare)


COMPLETIONS = [
    ("She has 3+4=7 apples.\n#### 7", "7"), ("#### 1,234", "1234"), ("#### $5", "5"), ("#### -3", "-3"),
    ("#### 7.0", "7"), ("The answer is 7", "7"), ("#### 6 then #### 7", "7"), ("#### 7 then #### 6", "7"),
    ("####7", "7"), ("", "7"), ("x" * 400 + "#### 7", "7"), ("#### 7" + "x" * 400, "7"), ("#### .", "7"),
    ("no digits", "7"), ("2 and 3 and .", "3"), ("#### 12,", "12"),
    ("#### 7" + "x" * 250, "7"), ("#### 7" + "x" * 294, "7"), ("#### 7" + "x" * 295, "7"),  # the 300-char window
]


def test_the_gsm8k_reward_follows_verls_rules():
    """Without veRL: the rules its compute_score documents (strict '#### N', last match, commas removed, the last
    300 characters only; format_score for a well-formed wrong answer)."""
    r = grpo_rewards.gsm8k
    assert r("Work: 3+4=7.\n#### 7", "7") == 1.0 and r("#### 1,234", "1234") == 1.0
    assert r("The answer is 7", "7") == 0.0 and r("#### 8", "7") == 0.0
    assert r("#### 8", "7", format_score=0.1) == 0.1 and r("no answer", "7", format_score=0.1) == 0.0
    assert r("#### 6 ... #### 7", "7") == 1.0 and r("#### 7" + "x" * 400, "7") == 0.0
    assert r("The answer is 7", "7", method="flexible") == 1.0
    name, fn = grpo_rewards.build({"name": "gsm8k", "format_score": 0.1})
    assert name == "gsm8k" and fn("#### 8", "7") == 0.1


@pytest.mark.parametrize("method,format_score", [("strict", 0.0), ("strict", 0.1), ("flexible", 0.0),
                                                 ("flexible", 0.2)])
def test_the_gsm8k_reward_scores_as_verls_compute_score(method, format_score):
    verl_gsm8k = pytest.importorskip("verl.utils.reward_score.gsm8k")
    for completion, truth in COMPLETIONS:
        theirs = verl_gsm8k.compute_score(completion, truth, method=method, format_score=format_score)
        ours = grpo_rewards.gsm8k(completion, truth, method=method, format_score=format_score)
        assert ours == float(theirs), (completion, truth, ours, theirs)

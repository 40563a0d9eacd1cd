"""Hardening, round four (issue 50): bad input that became an `error` or `diverged` run is refused before the clock
(exit 2, nothing recorded, the file and the field or token position named), a checkpoint index cannot read outside
its folder, and a data folder with glob characters in its name is found. Each case failed on the code before its
fix (docs/reliability.md, round four)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.promised import require

from suite.data.base import DataMissing
from suite.models.hf import tensors as hf_tensors

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "suite.cli", "run", *args, "--threads", "1"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env},
                          capture_output=True, text=True, timeout=300)


# ---- item 8: a checkpoint's config.json and weights ------------------------------------------------------------


def _zero_heads(folder: Path) -> str:
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "num_attention_heads": 0}))
    return "config.json: field 'num_attention_heads' is 0"


def _layers_overflow(folder: Path) -> str:
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text.replace('"num_hidden_layers": 2', '"num_hidden_layers": 1e400'))
    return "config.json: field 'num_hidden_layers' is inf"


def _nan_weight(folder: Path) -> str:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    tensors["model.layers.1.mlp.down_proj.weight"].view(-1)[7] = float("nan")
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return "model.safetensors: tensor 'model.layers.1.mlp.down_proj.weight' holds nan at element 7"


def _shard_outside(folder: Path) -> str:
    """item 9: an index naming `../` (a shard outside the folder, a whole working copy of it)."""
    from suite.models.hf import checkpoint as hf_checkpoint

    hf_checkpoint.save_llama(hf_checkpoint.load_llama(folder, hf_checkpoint.config_for(folder)), folder,
                             max_shard_bytes=100_000)
    (folder / "model.safetensors").unlink()
    index = json.loads((folder / hf_tensors.INDEX).read_text())
    first = sorted(set(index["weight_map"].values()))[0]
    shutil.move(folder / first, folder.parent / first)
    index["weight_map"] = {k: f"../{v}" if v == first else v for k, v in index["weight_map"].items()}
    (folder / hf_tensors.INDEX).write_text(json.dumps(index))
    return f"weight_map names shard(s) '../{first}' outside the checkpoint folder"


@pytest.mark.parametrize("breaks", [_zero_heads, _layers_overflow, _nan_weight, _shard_outside])
def test_a_broken_checkpoint_is_refused_naming_file_and_field(breaks, tmp_path):
    """Each a CheckpointError (a DataMissing) from the loader the run's untimed init calls; the CLI test below
    takes one of them through `trainbench run` (every DataMissing there is exit 2 with nothing recorded)."""
    from support.datafiles import write_fused_qkv_llama

    from suite.models.hf import checkpoint as hf_checkpoint

    folder = write_fused_qkv_llama(tmp_path / "model")
    expected = breaks(folder)
    with pytest.raises(DataMissing) as e:
        hf_checkpoint.load_llama(folder, hf_checkpoint.config_for(folder))
    assert expected in str(e.value)


@pytest.mark.slow  # ~20 s at load 7: one run through the CLI
def test_nan_weights_exit_2_before_the_clock_naming_file_and_tensor(tmp_path):
    require("pyarrow")
    from support.datafiles import write_fused_qkv_llama, write_govreport

    data = write_govreport(tmp_path / "gr", seq_len=64, vocab=512)
    folder = write_fused_qkv_llama(tmp_path / "model")
    expected = _nan_weight(folder)
    out = _run("nlp/llama2_70b_lora", "--variant", "tiny", "--set", f"data.path={data}", "--set",
               f"model.checkpoint={folder}", "--results", str(tmp_path / "res"))
    said = " ".join((out.stdout + out.stderr).split())
    assert out.returncode == 2, out.stderr[-2000:]
    assert expected in said and "Traceback" not in said, said[-2000:]
    assert not list((tmp_path / "res").rglob("*.json"))


def test_config_sizes_are_checked_field_by_field(tmp_path):
    from suite.models.hf import checkpoint as hf_checkpoint

    base = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 300}
    for field, value in [("num_attention_heads", 0), ("hidden_size", -64), ("vocab_size", 2.5),
                         ("intermediate_size", "128"), ("num_hidden_layers", True), ("num_attention_heads", 128)]:
        with pytest.raises(DataMissing, match=rf"cfg\.json: .*{field}|head dimension"):
            hf_checkpoint.suite_fields({**base, field: value}, tmp_path / "cfg.json")
    assert hf_checkpoint.suite_fields(base, tmp_path / "cfg.json")["head_dim"] == 16


# ---- item 8: a chat template that raises -----------------------------------------------------------------------


RAISES = "{{ raise_exception('this template takes no system role') }}"


@pytest.mark.parametrize("template, said", [
    (RAISES, "chat_template raised TemplateError: this template takes no system role"),
    ("{% set seen = [] %}{{ seen.append(1) }}", "chat_template raised SecurityError"),  # the sandbox's refusal
])
def test_a_chat_template_that_raises_is_refused_naming_the_file(template, said, tmp_path):
    from suite.data.rl import gsm8k
    from suite.data.synthetic import gsm8k as fixture

    root = fixture.write(tmp_path / "gsm8k-tiny")
    config = root / "model" / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "chat_template": template}))
    with pytest.raises(DataMissing) as e:
        gsm8k.load(gsm8k.Config(path=str(root / "data"), tokenizer=str(root / "model"), max_prompt_length=256))
    assert f"{config}: {said}" in str(e.value)


@pytest.mark.slow  # ~20 s at load 7: one run through the CLI
def test_a_chat_template_that_raises_exits_2_and_records_nothing(tmp_path):
    template, said = RAISES, "chat_template raised TemplateError: this template takes no system role"
    from suite.data.synthetic import gsm8k as fixture

    root = fixture.write(tmp_path / "data" / "gsm8k-tiny")
    config = root / "model" / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "chat_template": template}))
    out = _run("rl/gsm8k_grpo", "--variant", "tiny", "--results", str(tmp_path / "res"),
               TRAINBENCH_DATA=str(tmp_path / "data"))
    text = " ".join((out.stdout + out.stderr).split())
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"{config}: {said}" in text and "Traceback" not in text, text[-2000:]
    assert not list((tmp_path / "res").rglob("*.json"))


# ---- item 8: token ids outside the vocabulary; item 12: a folder named with glob characters -------------------


def _indexed(prefix: Path, tokens: list[int]) -> None:
    """A one-document .bin/.idx pair, in the format megatron-core writes (tests/data/test_megatron_indexed.py
    checks this reader against megatron's own builder)."""
    from suite.data.text import megatron_indexed as mi

    data = np.asarray(tokens, dtype=np.int32)
    prefix.with_name(prefix.name + ".bin").write_bytes(data.tobytes())
    head = mi.MAGIC + np.uint64(1).tobytes() + bytes([4]) + np.uint64(2).tobytes() + np.uint64(2).tobytes()
    lengths = np.asarray([4, len(tokens) - 4], dtype=np.int32)
    pointers = np.asarray([0, 16], dtype=np.int64)
    bounds = np.asarray([0, 2], dtype=np.int64)
    prefix.with_name(prefix.name + ".idx").write_bytes(head + lengths.tobytes() + pointers.tobytes()
                                                       + bounds.tobytes())


@pytest.mark.parametrize("bad, position", [(500, "token 6 (sequence 1, position 2) is id 500"),
                                           (-3, "token 6 (sequence 1, position 2) is id -3")])
def test_token_ids_outside_the_vocabulary_are_refused_naming_file_and_position(bad, position, tmp_path):
    from suite.data.text import megatron_indexed as mi

    folder = tmp_path / "we[ir]d c4"  # item 12: glob characters in data.path are part of its name
    folder.mkdir()
    _indexed(folder / "c4-validation_text_document", list(range(10)))
    _indexed(folder / "c4-train_text_document", [1, 2, 3, 4, 5, 6, bad, 8, 9])
    with pytest.raises(DataMissing) as e:
        mi.load(mi.Config(path=str(folder), vocab_size=500))
    assert f"{folder}/c4-train_text_document.bin: {position}, outside the vocabulary [0, 500)" in str(e.value)
    _indexed(folder / "c4-train_text_document", [1, 2, 3, 4, 5, 6, 499, 8, 9])
    assert mi.load(mi.Config(path=str(folder), vocab_size=500)).train_tokens() == 9


def test_text_shards_are_found_in_a_folder_named_with_glob_characters(tmp_path):
    from suite.data.text import streams as text

    folder = tmp_path / "runs [v2]*"
    folder.mkdir()
    for name in ("fineweb_train_000001.bin", "fineweb_val_000000.bin"):
        text.write_shard(folder / name, np.arange(300, dtype=np.uint16))
    found, train, val = text.locate_shards(text.ShardConfig(path=str(folder)))
    assert found == folder and [p.name for p in train] == ["fineweb_train_000001.bin"] and len(val) == 1


# ---- item 15: `spec validate` imports plug-ins, and says so ------------------------------------------------------


def test_spec_validate_says_it_runs_plug_in_code_and_does(tmp_path):
    """The help names every import-path field; a grpo.reward module that leaves a mark when imported shows the
    warning is true (validation imports it), and docs/reliability.md's list names grpo.reward."""
    import yaml

    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{tmp_path}", "COLUMNS": "200"}
    help_text = " ".join(subprocess.run([sys.executable, "-m", "suite.cli", "spec", "validate", "--help"], cwd=ROOT,
                                        env=env, capture_output=True, text=True, timeout=120).stdout.split())
    assert "importing a module runs its code" in help_text
    for field in ("task", "model.arch", "data.name", "optimizer.name", "schedule.name", "loss", "compression",
                  "grpo.reward"):
        assert field in help_text, field
    assert "`grpo.reward`" in (ROOT / "docs" / "reliability.md").read_text()
    mark = tmp_path / "imported"
    (tmp_path / "marking_reward.py").write_text(f"open({str(mark)!r}, 'w').close()\n\ndef score(c, a):\n    return 0.0\n")
    spec = yaml.safe_load((ROOT / "workloads" / "rl" / "arithmetic_grpo.yaml").read_text())
    spec["grpo"]["reward"], spec["name"] = "marking_reward:score", "rl/marking_copy"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    p = subprocess.run([sys.executable, "-m", "suite.cli", "spec", "validate", str(tmp_path / "s.yaml")], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert mark.exists()

"""MLPerf's llama2_70b_lora in veRL 0.9.1's SFT trainer's terms (suite/backends/verl/sft.py): the overrides composed
by veRL's own Hydra config and built into its dataclasses, a LoRA key veRL's FSDP config lacks refused by Hydra, and
every veRL line the support matrix quotes for this cell (suite/backends/limits.py) read back from the installed veRL,
so a quote that goes stale on an upgrade fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from suite import registry
from suite.backends.limits import classify
from suite.backends.verl import sft
from suite.specload import load_spec

SPEC = registry.workload_files()["nlp/llama2_70b_lora"]
needs_verl = pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="veRL is not installed")


def _verl_lines(rel: str, first: int, last: int | None = None) -> str:
    root = Path(importlib.util.find_spec("verl").origin).parent
    lines = (root / rel).read_text().splitlines()
    return "\n".join(lines[first - 1:(last or first)])


def test_the_lora_recipe_becomes_sft_trainer_settings():
    spec = load_spec(SPEC, {})
    o = sft.overrides(spec, "/data/train.parquet", "/models/base")
    assert (o["model.lora_rank"], o["model.lora_alpha"]) == (16, 32)
    # qkv_proj is three linears in transformers' Llama; o_proj one
    assert o["model.target_modules"] == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert (o["data.train_batch_size"], o["data.micro_batch_size_per_gpu"], o["data.max_length"]) == (8, 1, 8192)
    assert (o["optim.lr"], o["optim.clip_grad"], o["optim.lr_scheduler_type"]) == (4e-4, 0.3, "cosine")
    assert o["trainer.total_training_steps"] == 1024 and o["trainer.test_freq"] == 48


def test_what_veRL_cannot_carry_is_named_only_where_the_spec_asks_for_it():
    full = sft.unexpressed(load_spec(SPEC, {}))
    assert [g.split(":")[0] for g in full] == ["model.lora.dropout 0.1", "model.fused_qkv with qkv_proj"]
    assert sft.unexpressed(load_spec(SPEC, {"model.lora.dropout": 0.0, "model.fused_qkv": False})) == []


@needs_verl
def test_veRLs_own_config_takes_the_overrides(tmp_path):
    from transformers import LlamaConfig

    LlamaConfig(architectures=["LlamaForCausalLM"], vocab_size=128, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2).save_pretrained(tmp_path)  # config.json: what HFModelConfig reads
    spec = load_spec(SPEC, {})
    built = sft.validate(sft.compose(sft.overrides(spec, str(tmp_path / "t.parquet"), str(tmp_path))))
    model, engine, optim = built["model"], built["engine"], built["optim"]
    assert (model.lora_rank, model.lora_alpha, sorted(model.target_modules)) == (
        16, 32, ["k_proj", "o_proj", "q_proj", "v_proj"])
    assert engine.strategy == "fsdp2"
    assert (optim.lr, optim.weight_decay, list(optim.betas), optim.clip_grad) == (4e-4, 1e-4, [0.9, 0.999], 0.3)


@needs_verl
def test_a_lora_dropout_key_is_refused_by_veRLs_config():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="lora_dropout"):
        sft.compose({"model.lora_dropout": 0.1})


@needs_verl
def test_the_veRL_lines_the_matrix_quotes_are_there():
    from verl.plugin.platform.platform_manager import PlatformRegistry

    assert set(PlatformRegistry.registered_names()) == {"nvidia", "huawei", "amd"}  # no CPU platform
    assert 'backend = f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in _verl_lines("utils/distributed.py", 63)
    impl = "workers/engine/fsdp/transformer_impl.py"
    assert 'backend=["fsdp", "fsdp2"], device=["cuda", "npu"]' in _verl_lines(impl, 1143)
    assert "auto_class.from_pretrained(" in _verl_lines(impl, 276)
    block = _verl_lines(impl, 359, 368)
    assert block.lstrip().startswith("lora_config = {") and "get_peft_model(module, LoraConfig(" in block
    assert "dropout" not in block
    assert "PeftModel.from_pretrained(module, local_adapter_path" in _verl_lines(impl, 342, 352)
    # what tests/support/verl_cpu_sft.py answers, and the imports the SFT trainer needs beside veRL
    assert _verl_lines("utils/device.py", 151).startswith("def auto_set_device(")
    assert 'if detected != "cpu" and config.trainer.device != detected:' in _verl_lines("utils/device.py", 160)
    assert "model.to(device=get_device_id()" in _verl_lines("utils/fsdp_utils.py", 507)
    assert "device_name = get_torch_device().get_device_name()" in _verl_lines("utils/flops_counter.py", 80)
    assert _verl_lines("workers/rollout/utils.py", 20, 22).split("\n")[::2] == ["import uvicorn", "from fastapi import FastAPI"]


def test_the_matrix_cell_cites_them():
    limit = classify("verl", load_spec(SPEC, {}))
    assert limit.kind == "engine limit"
    for cited in ("verl/utils/distributed.py:63", "transformer_impl.py:1143", "verl/utils/device.py:151",
                  "tests/support/verl_cpu_sft.py", "suite/backends/verl/sft_launch.py"):
        assert cited in limit.why
    assert classify("verl", load_spec(SPEC, {"model.lora": None})).kind == "not wired"  # a full fine-tune


def test_the_backend_takes_the_recipe_and_refuses_it_on_a_cpu_host(monkeypatch):
    from suite.backends.verl import options

    spec = load_spec(SPEC, {})
    monkeypatch.setattr(options, "_cuda_count", lambda: 0)
    assert options.supports(spec).startswith("veRL's SFT trainer trains on CUDA (or Ascend NPU) only")
    monkeypatch.setattr(options, "_cuda_count", lambda: 1)
    present = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "uvicorn" else present(n, *a))
    if present("verl") is not None:
        assert options.supports(spec).startswith("veRL's trainer cannot start here: ")
        assert "uvicorn" in options.supports(spec)
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object())
    assert options.supports(spec) is None  # vllm is not asked for: the SFT trainer rolls nothing out
    assert "model.lora" in options.supports(load_spec(SPEC, {"model.lora": None}))

"""A Hugging Face checkpoint under DeepSpeed ZeRO-3 (suite/backends/deepspeed/zero3.py): built partitioned and streamed,
each rank reading only its share of each tensor. Against transformers' logits for the same folder, with the
checkpoint bytes each path held counted; and the range reader that does it, against the whole-tensor reader."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import pytest
import torch
from support.backend_util import ROOT, env
from support.hf_reference import hf_llama, randomize
from support.promised import require
from test_llama import _max_abs, _tokens

from suite.measure import memory_lora
from suite.models.hf import checkpoint as ckpt
from suite.models.hf import tensors as hf_tensors
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama

torch.set_num_threads(1)


def _partition_ranges(numel: int, world: int) -> list[tuple[int, int]]:
    size = -(-numel // world)  # DeepSpeed's: ceil, the last rank's padded
    return [(min(r * size, numel), min((r + 1) * size, numel)) for r in range(world)]


@pytest.mark.parametrize("layout", ["fused_qkv", "mixtral", "wqkv_from_fused", "wqkv_from_split"])
def test_every_partition_read_alone_makes_the_whole_tensor(tmp_path, layout):
    """The ranges a rank reads (rows via get_slice, pieces of several experts stacked, a row range of the fused
    qkv_proj; for model.fused_qkv's wqkv the whole qkv_proj, or q/k/v_proj joined) put together are the tensor the
    whole-model path reads, and no range reads the whole tensor."""
    if layout == "mixtral":  # experts one by one on disk, as transformers writes them (test_hf_checkpoint.py)
        cfg = llama_config.Config(preset="gpt-oss-tiny", attention_bias=False)
        ckpt.save_llama(llama.build(cfg, {}), tmp_path, max_shard_bytes=30_000)
    elif layout == "wqkv_from_split":  # separate q/k/v_proj (3 shards: q, k and v in different files)
        cfg = llama_config.Config(preset="llama3.1-tiny", fused_qkv=True)
        ckpt.save_llama(llama.build(cfg.model_copy(update={"fused_qkv": False}), {}), tmp_path,
                        max_shard_bytes=10_000)
    else:
        from support.datafiles import write_fused_qkv_llama

        write_fused_qkv_llama(tmp_path)
        cfg = ckpt.config_for(tmp_path).model_copy(update={"fused_qkv": layout == "wqkv_from_fused"})
    plan = hf_tensors.plan(tmp_path, cfg)
    with plan.open() as reader:
        for name, entry in plan.entries.items():
            whole = reader.tensor(name).flatten()
            row_bytes = max(math.prod(s.shape[1:]) for s in entry.sources) * whole.element_size()
            parts = []
            for start, stop in _partition_ranges(entry.numel, 3):
                reader.reads = hf_tensors.Reads()
                parts.append(reader.flat(name, start, stop))
                # its share, two partial rows at most, and (stacked experts) the pieces joined
                assert reader.reads.peak <= 2 * ((stop - start) * whole.element_size() + 2 * row_bytes), name
            assert torch.equal(torch.cat(parts), whole), name
    assert any(len(e.sources) > 1 for e in plan.entries.values()) == (layout in ("mixtral", "wqkv_from_split"))
    assert ("layers.0.attention.wqkv.weight" in plan.entries) == layout.startswith("wqkv")


@pytest.mark.slow  # two ranks importing DeepSpeed on a busy 2-core machine: ~25 s
@pytest.mark.timeout(600)
def test_two_zero3_ranks_stream_a_transformers_checkpoint_and_give_its_logits(tmp_path):
    require("deepspeed")
    require("transformers")
    cfg = llama_config.Config(preset="llama3.1-tiny")
    hf_model = hf_llama(cfg)
    randomize(hf_model)
    folder = tmp_path / "model"
    hf_model.save_pretrained(folder, max_shard_size="40KB")
    assert len(hf_tensors.weight_files(folder)) > 3  # the index path
    idx = _tokens(cfg, batch=2)
    with torch.no_grad():
        logits = hf_model(idx).logits
        noise = _max_abs(logits, hf_model.double()(idx).logits)
    torch.save({"idx": idx, "logits": logits}, tmp_path / "ref.pt")
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    hf_tensors.weight_files(bad)[1].unlink()

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
           "support.zero3_load", str(tmp_path), str(folder), str(tmp_path / "ref.pt"), str(bad)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(DS_ACCELERATOR="cpu"), cwd=ROOT, timeout=540)
    assert p.returncode == 0, p.stderr[-4000:]
    rows = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]

    sizes = {}  # the checkpoint's tensors, from transformers' own files: bytes and one row's bytes
    from safetensors import safe_open

    for path in hf_tensors.weight_files(folder):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118
                t = f.get_tensor(name)
                sizes[name] = (t.numel() * t.element_size(), t[0].numel() * t.element_size() if t.dim() > 1 else 4)
    total, largest = sum(b for b, _ in sizes.values()), max(b for b, _ in sizes.values())
    row_bytes = max(r for _, r in sizes.values())
    for row in rows:
        assert row["world"] == 2 and row["partitioned"]
        # (a) the streamed partitions, gathered by DeepSpeed, give transformers' logits; so does the engine's
        # forward of arch hf_llama (+ LoRA at B = 0) built in the backend's ZeRO-3 context
        assert row["dtypes"] == ["torch.float32"], row["dtypes"]  # not bf16 on a CPU without fp16 (issue 42)
        assert 0 < noise and row["gap"] <= 4 * noise, f"rank {row['rank']}: logits off by {row['gap']:.3g}"
        assert row["engine_gap"] <= 4 * noise, f"rank {row['rank']}: engine's logits off by {row['engine_gap']:.3g}"
        # (b) streaming: this rank read its half of each tensor (and at most two rows more), one tensor at a time
        stream, whole = row["stream"], row["whole"]
        assert stream["peak"] <= largest / 2 + 2 * row_bytes < largest, stream
        assert stream["held"] <= total / 2 + 4 * len(sizes), stream  # its partitions (+ the last rank's padding)
        assert stream["peak"] + stream["held"] <= largest + stream["held"] < total
        assert stream["read"] <= total / 2 + 2 * row_bytes * len(sizes)
        # the whole-model path holds every byte of it (and reads all of it), whatever it reads at once
        assert whole["held"] == total and whole["read"] == total and whole["peak"] == largest, whole
        # what suite/measure/memory_lora.py says a rank holds while loading (the 70B LoRA spec's load note)
        estimate = {n: memory_lora.load_peak_bytes(cfg, "float32", n) for n in (1, 2)}
        assert stream["held"] + stream["peak"] <= estimate[2] < whole["held"] <= estimate[1]
        # (c) a partial folder refused on this path, before zero.Init built any parameter
        assert "names shard(s)" in row["bad"] and "partial" in row["bad"] and row["params_built_before_refusal"] == 0
        # LoRA on the partitioned base: one step moved the adapters, not the base
        assert row["lora_b_norm"] > 0 and row["base_unchanged"] and row["trainable"] == ["lora_A", "lora_B"]


def test_zero3_partitions_hold_the_checkpoint_dtype_on_every_x86_cpu(tmp_path):
    """Issue 42: on an AVX2-only AMD EPYC the streamed model's logits were 3.8e-2 from transformers' (passing on
    Intel). DeepSpeed 0.19.8's zero.Init keeps an explicit dtype only where its accelerator supports fp16 (on
    CPU: oneDNN fp16, Intel Sapphire Rapids+) and builds bf16 partitions everywhere else, so the fp32 checkpoint
    was rounded to bf16 on load. Both answers are given here on any CPU (the accelerator's `is_fp16_supported`
    set to each), so the test fails on every machine if the loader stops correcting it (hf_zero3.zero_init)."""
    require("deepspeed")
    folder = tmp_path / "model"
    ckpt.save_llama(llama.build(llama_config.Config(preset="llama3.1-tiny"), {}), folder)
    out = tmp_path / "dtypes.json"
    p = subprocess.run([sys.executable, "-m", "support.zero3_dtype", str(out), str(folder)], capture_output=True,
                       text=True, env=env(DS_ACCELERATOR="cpu"), cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    rows = json.loads(out.read_text())
    # the control: DeepSpeed's own choice for dtype=float32 (if this fails, DeepSpeed has fixed _set_dtype, and
    # hf_zero3.zero_init's correction can go)
    assert rows["fp16=True"]["bare"] == "torch.float32" and rows["fp16=False"]["bare"] == "torch.bfloat16", rows
    for cpu, row in rows.items():
        assert row["partitions"] == ["torch.float32"], (cpu, row)
        assert row["gap"] <= 1e-6, (cpu, row)  # the same forward of the same fp32 weights (bf16 ones: ~1e-2)


def test_a_bad_folder_under_zero3_exits_2_before_the_clock_and_records_nothing(tmp_path):
    """The MLPerf workload's own layout (backends.deepspeed.zero_stage: 3) through the CLI: a checkpoint whose
    config.json declares a shape its tensors do not have is refused by the streaming path's plan, exit 2."""
    require("deepspeed")
    require("pyarrow")
    from support.datafiles import write_fused_qkv_llama, write_govreport

    data = write_govreport(tmp_path / "gr", seq_len=64, vocab=512)
    folder = write_fused_qkv_llama(tmp_path / "model", ffn=128)  # the spec's tiny shape says 160
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "intermediate_size": 160}))
    p = subprocess.run([sys.executable, "-m", "suite.cli", "run", "nlp/llama2_70b_lora", "--variant", "tiny",
                        "--backend", "deepspeed", "--set", f"data.path={data}", "--set", f"model.checkpoint={folder}",
                        "--threads", "1", "--results", str(tmp_path / "res")],
                       capture_output=True, text=True, env=env(DS_ACCELERATOR="cpu"), cwd=ROOT, timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    said = " ".join((p.stdout + p.stderr).split())
    assert "model.safetensors: tensor model.layers.0.mlp.down_proj.weight has shape (64, 128), the model " \
           "config.json describes needs (64, 160)" in said, said[-2000:]
    assert not list((tmp_path / "res").rglob("*.json"))


def test_mixtral_experts_missing_or_misshapen_are_refused_from_the_headers(tmp_path):
    """The per-expert tensors both paths stack: one missing, or one of another shape, names it before any read."""
    from safetensors.torch import load_file, save_file

    cfg = llama_config.Config(preset="gpt-oss-tiny", attention_bias=False)
    ckpt.save_llama(llama.build(cfg, {}), tmp_path)
    tensors = load_file(tmp_path / hf_tensors.SINGLE)
    name = "model.layers.1.block_sparse_moe.experts.2.w3.weight"
    save_file({k: v for k, v in tensors.items() if k != name}, str(tmp_path / hf_tensors.SINGLE))
    with pytest.raises(hf_tensors.CheckpointError, match=rf"tensor {name} is in no file of {tmp_path} \(1 expert"):
        hf_tensors.plan(tmp_path, cfg)
    save_file({**tensors, name: tensors[name][:-1]}, str(tmp_path / hf_tensors.SINGLE))
    with pytest.raises(hf_tensors.CheckpointError, match=rf"tensor {name} has shape \(\d+, 48\), expert 0's has"):
        hf_tensors.plan(tmp_path, cfg)

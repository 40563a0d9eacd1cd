"""One rank of tests/models/test_hf_zero3.py: a Hugging Face folder loaded under DeepSpeed ZeRO-3 by streaming
(suite/backends/deepspeed/zero3.py): a bad folder refused before anything is built; the checkpoint bytes each path held;
the logits (partitions gathered, and through the engine) against transformers' (saved by the test); LoRA on it.

    python -m torch.distributed.run --standalone --nproc_per_node 2 -m support.zero3_load OUT_DIR FOLDER REF.pt BAD
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def _held_bytes(model: torch.nn.Module) -> int:
    """The bytes of weights this rank's model keeps: its ZeRO-3 partitions, or every (distinct) parameter."""
    seen, total = set(), 0
    for t in model.parameters():
        held = getattr(t, "ds_tensor", t)
        key = held.untyped_storage().data_ptr()
        if key not in seen and held.numel():
            seen.add(key)
            total += held.untyped_storage().nbytes()
    return total


def main(out_dir: str, folder: str, ref_path: str, bad: str) -> None:
    import time

    t0 = time.perf_counter()
    torch.set_num_threads(1)
    from suite.backends.deepspeed.backend import Options, _import_deepspeed, _skip_shm_build, ds_config

    deepspeed = _import_deepspeed("cpu")
    _skip_shm_build()
    dist.init_process_group("gloo")  # as the harness does: deepspeed.comm is the loader's to set up
    from suite.backends.deepspeed import zero3 as hf_zero3
    from suite.data.base import DataMissing
    from suite.models.common import configs as common_configs
    from suite.models.common import lora as lora_mod
    from suite.models.hf import checkpoint as hf_checkpoint
    from suite.models.hf import config as hf_config_mod
    from suite.models.hf import pretrained
    from suite.models.hf import tensors as hf_tensors

    rank, world = dist.get_rank(), dist.get_world_size()
    times = {"imports_s": time.perf_counter() - t0}
    config = ds_config(Options(zero_stage=3), "fp32", global_batch=world, dp=world)
    ref = torch.load(ref_path)
    row: dict = {"rank": rank, "world": world}

    # (c) a bad folder on this path: refused by the plan, before zero.Init has built (or broadcast) anything
    before = deepspeed.zero.Init.param_id
    try:
        with hf_zero3.zero3_build(deepspeed, config, None):
            hf_zero3.load_partitioned(bad, hf_checkpoint.config_for(bad))
        row["bad"] = None
    except DataMissing as e:
        row["bad"] = str(e)
    row["params_built_before_refusal"] = deepspeed.zero.Init.param_id - before

    # (b) the checkpoint bytes each path held at once (reads beyond the model's storage), and what the model keeps;
    # the streamed model's logits from its partitions gathered by DeepSpeed
    cfg = hf_config_mod.Config(preset="llama3.1-tiny", checkpoint=folder)
    shape = hf_checkpoint.config_for(folder, pretrained.shape(cfg))
    streamed, whole = hf_tensors.Reads(), hf_tensors.Reads()
    with hf_zero3.zero3_build(deepspeed, config, None):
        partitioned = hf_zero3.load_partitioned(folder, shape, reads=streamed)
    row["stream"] = {"peak": streamed.peak, "read": streamed.total, "held": _held_bytes(partitioned)}
    row["dtypes"] = sorted({str(p.ds_tensor.dtype) for p in partitioned.parameters()})  # the checkpoint's fp32
    row["partitioned"] = all(p.numel() == 0 and p.ds_tensor.numel() < p.ds_numel for p in partitioned.parameters())
    with deepspeed.zero.GatheredParameters(list(partitioned.parameters())), torch.no_grad():
        row["gap"] = float((partitioned(ref["idx"]) - ref["logits"]).abs().max())
    full = hf_checkpoint.load_llama(folder, shape, reads=whole)
    row["whole"] = {"peak": whole.peak, "read": whole.total, "held": _held_bytes(full)}
    times["stream_s"] = time.perf_counter() - t0 - sum(times.values())

    # (a) the real dispatch (arch hf_llama built in the backend's ZeRO-3 context), with LoRA adapters injected
    # after the load and partitioned by deepspeed.initialize: the engine's logits at B = 0 are the base's, then
    # one step on this rank's sample moves only the adapters
    lora = common_configs.LoraConfig(rank=4, alpha=8, target_modules=["qkv_proj", "o_proj"])
    with hf_zero3.zero3_build(deepspeed, config, None):
        lmodel = pretrained.build(cfg.model_copy(update={"lora": lora}), {})
    opt = torch.optim.SGD(lora_mod.adapter_parameters(lmodel), lr=0.5)
    engine, *_ = deepspeed.initialize(model=lmodel, optimizer=opt, config=config)
    logits = engine(ref["idx"])
    row["engine_gap"] = float((logits.detach() - ref["logits"]).abs().max())
    mine = slice(rank, rank + 1)
    loss = torch.nn.functional.cross_entropy(logits[mine, :-1].reshape(-1, logits.shape[-1]),
                                             ref["idx"][mine, 1:].reshape(-1))
    engine.backward(loss)
    engine.step()
    names = dict(lmodel.named_parameters())
    base = names["layers.0.attention.wq.base_layer.weight"]
    b = names["layers.0.attention.wq.lora_B.default.weight"]
    with deepspeed.zero.GatheredParameters([base, b]), torch.no_grad():
        row["lora_b_norm"] = float(b.norm())
        row["base_unchanged"] = bool(torch.equal(base, full.layers[0].attention.wq.weight))
    row["trainable"] = sorted({n.split(".")[-3] for n, p in lmodel.named_parameters() if p.requires_grad})
    times["engine_s"] = time.perf_counter() - t0 - sum(times.values())
    row["times"] = times
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(row))
    dist.barrier()


if __name__ == "__main__":
    main(*sys.argv[1:5])

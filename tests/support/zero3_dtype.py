"""One rank of tests/models/test_hf_zero3.py's dtype test: a float32 checkpoint loaded by ZeRO-3 streaming
(suite/backends/deepspeed/zero3.py) as each kind of x86 CPU answers DeepSpeed's accelerator: with oneDNN fp16 (AVX512-FP16
or AMX-FP16, Intel Sapphire Rapids+) and without it (every AVX2-only CPU, AMD Zen 4/5, ONEDNN_MAX_CPU_ISA=AVX2).
Writes, per answer, the dtype a bare `deepspeed.zero.Init(dtype=float32)` builds in (the control: DeepSpeed
0.19.8's own choice), the dtypes of the loader's partitions, and its logits' gap from the whole-model path's.

    python -m support.zero3_dtype OUT.json FOLDER     (one process: it sets up its own one-rank gloo group)
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(out: str, folder: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(_free_port()))
    from suite.backends.deepspeed.backend import Options, _import_deepspeed, _skip_shm_build, ds_config

    deepspeed = _import_deepspeed("cpu")
    _skip_shm_build()
    dist.init_process_group("gloo")
    from deepspeed.accelerator import get_accelerator

    from suite.backends.deepspeed import zero3 as hf_zero3
    from suite.models.hf import checkpoint as hf_checkpoint
    from suite.models.hf import config as hf_config_mod
    from suite.models.hf import pretrained
    from suite.models.llama import model as llama

    shape = hf_checkpoint.config_for(folder, pretrained.shape(hf_config_mod.Config(preset="llama3.1-tiny",
                                                                                checkpoint=folder)))
    idx = torch.randint(0, llama.vocab(shape, {}), (2, shape.seq_len), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf_checkpoint.load_llama(folder, shape)(idx)
    config = ds_config(Options(zero_stage=3), "fp32", global_batch=1, dp=1)
    accelerator, rows = get_accelerator(), {}
    for fp16 in (True, False):
        accelerator.is_fp16_supported = lambda fp16=fp16: fp16  # what this kind of CPU answers
        with deepspeed.zero.Init(config_dict_or_path=config, dtype=torch.float32):
            bare = torch.nn.Linear(4, 4)
        with hf_zero3.zero3_build(deepspeed, config, None):
            model = hf_zero3.load_partitioned(folder, shape)
        with deepspeed.zero.GatheredParameters(list(model.parameters())), torch.no_grad():
            gap = float((model(idx) - want).abs().max())
        rows[f"fp16={fp16}"] = {"bare": str(bare.weight.ds_tensor.dtype), "gap": gap,
                                "partitions": sorted({str(p.ds_tensor.dtype) for p in model.parameters()})}
    Path(out).write_text(json.dumps(rows))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])

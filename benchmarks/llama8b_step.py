"""Llama 3.1 8B's training step on one device, for benchmarks/device_check.py: the 8B preset at sequence 8192,
with as many of its 32 layers as the memory estimator (suite/measure/llm_memory.py) fits on the device, in bf16
autocast, AdamW; step time, tokens/s and MFU (6N + attention FLOPs per token, the preset's own count, over the
device's dense bf16 peak). Beside it, the goal a first lent GPU is measured against: torchtitan's published Llama
3.1 8B on 8 x H100 (FSDP, bf16).

The dry mode (CPU) runs a tiny stand-in (the llama3.1-tiny preset) through the same code, so a test checks it.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F

from suite.measure import llm_memory, memory, peaks
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama

# torchtitan's benchmarks/llama3_h100_202412_torchtitan.md (Llama 3.1 8B, 8 x H100 SXM, FSDP, bf16, sequence 8192,
# local batch 2 per GPU; the figures TrainBench's issue 30 asks to record beside the measured ones)
TORCHTITAN_GOAL = {
    "tokens_per_s_per_gpu": 5762, "tokens_per_s_per_gpu_compiled": 6667, "mfu_range": [0.33, 0.39],
    "setup": "Llama 3.1 8B, 8 x H100 (96 GB HBM2e, 500 W), FSDP, bf16, sequence 8192, local batch 2, selective "
             "activation checkpointing (torch.compile for the second figure; MFU 33-39% without Float8, against the "
             "H100 SXM peak)",
    "source": "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md",
}
FULL_LAYERS = 32


def layers_that_fit(device_bytes: int, seq_len: int = 8192, headroom: float = 0.2, micro_batch: int = 1) -> int:
    """The most layers of the 8B preset whose step the estimator fits in `device_bytes` (one device, bf16, AdamW)."""
    best = 0
    for n in range(1, FULL_LAYERS + 1):
        cfg = llama_config.Config(preset="llama3.1-8b", n_layer=n, seq_len=seq_len)
        est = llm_memory.estimate_llama(cfg, micro_batch=micro_batch, vocab_size=128256, precision="bf16")
        if not memory.fits(est, device_bytes, headroom).fits:
            break
        best = n
    return best


def measure(device: torch.device, cfg: llama_config.Config, steps: int, compile_model: bool, peak_flops: float | None,
            micro_batch: int = 1) -> dict[str, Any]:
    """`steps` timed training steps (after 2 warm-up ones) of `cfg` on random tokens; the figures of each."""
    torch.manual_seed(0)
    vocab = cfg.vocab_size or 128256
    with device:  # built and initialised where it runs: billions of parameters drawn on a host CPU take minutes
        model = llama.build(cfg, {})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1,
                            fused=device.type == "cuda")
    run = torch.compile(model) if compile_model else model
    x = torch.randint(0, vocab, (micro_batch, cfg.seq_len), device=device)
    dtype = torch.bfloat16 if device.type != "cpu" else torch.float32  # CPU autocast bf16 is 10-26x slower

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits = run(x)
            loss = F.cross_entropy(logits.reshape(-1, vocab).float(), x.roll(-1, 1).reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(2):
        step()
    sync()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t)
    step_s = sorted(times)[len(times) // 2]
    tokens = micro_batch * cfg.seq_len
    flops_per_token = llama.flops_per_token(cfg, {"vocab_size": vocab})
    mfu = flops_per_token * tokens / step_s / peak_flops if peak_flops else None
    full = llama_config.Config(preset="llama3.1-8b") if cfg.preset == "llama3.1-8b" else cfg
    full_flops = llama.flops_per_token(full, {"vocab_size": vocab})
    out = {"layers": cfg.n_layer, "seq_len": cfg.seq_len, "micro_batch": micro_batch, "compile": compile_model,
           "dtype": str(dtype).removeprefix("torch."), "steps": steps, "step_time_p50_s": step_s,
           "tokens_per_s": tokens / step_s, "mfu": mfu, "flops_per_token": flops_per_token,
           # what the whole model's tokens/s would be at the same MFU: a projection, named as one
           "projected_full_model_tokens_per_s": tokens / step_s * flops_per_token / full_flops,
           "peak_tflops": peak_flops / 1e12 if peak_flops else None}
    if device.type == "cuda":
        out["device_peak_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
    return out


def probe(device: torch.device, device_name: str, device_bytes: int | None, steps: int = 5,
          compile_model: bool = True, threads: int | None = None, micro_batch: int = 2) -> dict[str, Any]:
    """The 8B preset's step on an accelerator; the tiny stand-in on a CPU (dry mode). Never raises: a failure is a
    row with its error."""
    row: dict[str, Any] = {"goal": TORCHTITAN_GOAL}
    try:
        if device.type == "cpu":
            cfg = llama_config.Config(preset="llama3.1-tiny", seq_len=256)
            table = peaks.cpu_peak("fp32", threads)
            row["stand_in"] = "llama3.1-tiny at sequence 256 (dry mode: the code path, not the 8B figures)"
        else:
            n = layers_that_fit(device_bytes or 0, micro_batch=micro_batch)
            if n == 0:
                return {**row, "error": f"not one layer of the 8B preset fits {device_bytes} bytes"}
            cfg = llama_config.Config(preset="llama3.1-8b", n_layer=n)
            table = peaks.lookup(device_name, "bf16")
        row.update(measure(device, cfg, steps, compile_model and device.type != "cpu",
                           table.flops_per_s if table else None, micro_batch))
        row["peak_source"] = table.source if table else None
    except Exception as e:  # noqa: BLE001 - the device check records a failed probe and goes on
        row["error"] = f"{type(e).__name__}: {e}"
    return row

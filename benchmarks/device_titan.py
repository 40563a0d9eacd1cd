"""The torchtitan row of benchmarks/device_check.py (issue 37): torchtitan's own Llama 3.1 8B config at sequence
8192 on as many layers as fit one device, through the torchtitan backend's parallelize path, timed, beside
torchtitan's published figure for the whole model."""

from __future__ import annotations

import time
from typing import Any

import torch

from suite import devices

# torchtitan's own figure for Llama 3.1 8B (32 layers, sequence 8192, bf16, FSDP, torch.compile) on 8 x H100
TITAN_PUBLISHED_8B = {"tokens_per_s_per_gpu": 6667, "setup": "torchtitan Llama 3.1 8B, 8 x H100, FSDP, bf16, compile"}


def titan_llama8b_row(device: torch.device, device_bytes: int | None, compile: bool, steps: int = 6,
                      flavor: str = "8B", seq_len: int = 8192, attention: str = "flex") -> dict[str, Any]:
    """torchtitan's own Llama 3.1 8B config (`llama3_configs[flavor]`) on as many of its 32 layers as fit one
    device at `seq_len` (fp32 AdamW state ~16 B per parameter, ~2 GiB of bf16 activations per layer at 8192),
    through the torchtitan backend's parallelize path (parallelize_llama: bf16 FSDP policy, per-block compile);
    tokens/s/device over the steps after the first two, beside torchtitan's published whole-model figure. On CPU
    (the dry mode's test) a small flavor with attention sdpa runs the same code."""
    from torchtitan.models.llama3 import llama3_configs

    from suite.backends.torchtitan.model import use_sdpa

    config = llama3_configs[flavor](attn_backend="flex" if attention == "sdpa" else attention)
    if attention == "sdpa":
        config = use_sdpa(config)
    n_all, dim, vocab = len(config.layers), config.dim, config.vocab_size
    per_layer = 16 * 13 * dim * dim + (2 * 2**30 * seq_len / 8192 * dim / 4096)  # 218M params at dim 4096
    fixed = 16 * 2 * vocab * dim + 4 * seq_len * vocab * 2  # embeddings + head, fp32 logits and their grad
    n = n_all if not device_bytes else max(1, min(n_all, int((0.85 * device_bytes - fixed) // per_layer)))
    row: dict[str, Any] = {"workload": f"llama3.1-{flavor} x{n} layers (torchtitan's config)", "backend": "torchtitan",
                           "layers": n, "of_layers": n_all, "seq_len": seq_len, "attention": attention,
                           "published": TITAN_PUBLISHED_8B}
    layers = config.layers
    for _attempt in range(2):  # out of memory: once more on three quarters of the layers
        config.layers = layers[:n]
        row.update(layers=n, workload=f"llama3.1-{flavor} x{n} layers (torchtitan's config)")
        row.update(_titan_steps(config, device, compile, steps, seq_len, attention))
        if "OutOfMemoryError" not in str(row.get("error")) or n == 1:
            break
        n = max(1, n * 3 // 4)
        torch.cuda.empty_cache()
    if flavor == "8B" and row.get("tokens_per_s"):  # achieved model FLOP/s: comparable across layer counts
        from suite.models.llama import config as llama_config
        from suite.models.llama import model as llama

        def per_token(layers: int) -> float:
            return llama.flops_per_token(llama_config.Config(preset="llama3.1-8b", n_layer=layers, seq_len=seq_len), {})

        row["model_tflops"] = row["tokens_per_s"] * per_token(n) / 1e12
        row["published_model_tflops_per_gpu"] = TITAN_PUBLISHED_8B["tokens_per_s_per_gpu"] * per_token(n_all) / 1e12
    return row


def _titan_steps(config: Any, device: torch.device, compile: bool, steps: int, seq_len: int,
                 attention: str) -> dict[str, Any]:
    from suite.backends.base import RunOptions
    from suite.backends.layout import Layout
    from suite.backends.torchtitan.backend import TorchtitanBackend

    backend = TorchtitanBackend(devices.current())
    try:
        with torch.device("meta"):
            model = config.build()
        model = backend.parallelize(model, False, Layout(), RunOptions("bf16", compile))
        model.to_empty(device=device)
        with torch.no_grad():
            model.init_states(buffer_device=device)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device.type == "cuda")
        tokens = torch.randint(0, config.vocab_size, (1, seq_len + 1), device=device)
        masks = model.get_attention_masks(positions=torch.arange(seq_len, device=device)[None]) \
            if attention != "sdpa" else None
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            logits = model(tokens[:, :-1], attention_masks=masks)
            torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens[0, 1:]).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            devices.current().synchronize()
            times.append(time.perf_counter() - t)
        steady = sorted(times[2:] or times)[len(times[2:] or times) // 2]
        return {"status": "budget", "error": None, "step_time_p50_s": steady, "tokens_per_s": seq_len / steady,
                "peak_memory_bytes": torch.cuda.max_memory_allocated() if device.type == "cuda" else None}
    except Exception as e:  # noqa: BLE001 - recorded; out of memory: the layer estimate was too generous
        return {"status": "error", "error": f"{type(e).__name__}: {str(e)[:300]}"}
    finally:
        backend.close()

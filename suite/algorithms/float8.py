"""float8 training through torchao (`--precision float8`), applied from outside as torchtitan's float8 converter.

The model's Linear layers become torchao `Float8Linear`s (dynamic tensorwise scaling: e4m3 inputs and
weights, e5m2 gradients), their matmuls run in float8 through `torch._scaled_mm`; everything else runs under
bf16 autocast with fp32 weights. Which layers: as torchtitan, every Linear except the output head (its
logits are precision-sensitive) and any whose in/out features are not multiples of 16 (the float8 GEMM's
shape rule). float8 GEMMs exist on CUDA devices of compute capability 8.9+ (Ada, Hopper, Blackwell) only:
elsewhere the recipe is refused before the run starts, with a reason that starts with "hardware:".
"""

from __future__ import annotations

import importlib.util

import torch
from torch import nn

MIN_CAPABILITY = (8, 9)
HEAD_NAMES = ("lm_head", "output", "head")


def unsupported_reason(device_type: str) -> str | None:
    """Why this device cannot train in float8 (None when it can): hardware first, then the package."""
    if device_type != "cuda":
        return (f"hardware: float8 training needs a CUDA GPU of compute capability {MIN_CAPABILITY[0]}."
                f"{MIN_CAPABILITY[1]}+ (float8 matmuls through torch._scaled_mm); this run's device is "
                f"{device_type}. Use --precision bf16 here")
    cap = torch.cuda.get_device_capability()
    if tuple(cap) < MIN_CAPABILITY:
        return (f"hardware: float8 training needs compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}+ "
                f"(Ada, Hopper or later); this GPU has {cap[0]}.{cap[1]}. Use --precision bf16")
    if importlib.util.find_spec("torchao") is None:
        return "float8 training needs the torchao package: pip install 'trainbench-suite[float8]' (or torchao)"
    return None


def eligible(fqn: str, module: nn.Module) -> bool:
    """torchtitan's filter: a Linear, not the output head, both dimensions multiples of 16."""
    if not isinstance(module, nn.Linear):
        return False
    if fqn.split(".")[-1] in HEAD_NAMES:
        return False
    return module.in_features % 16 == 0 and module.out_features % 16 == 0


def convert(model: nn.Module) -> list[str]:
    """Swap the eligible Linear layers for torchao's Float8Linear, in place; return their names."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    chosen = [fqn for fqn, m in model.named_modules() if eligible(fqn, m)]
    if chosen:
        wanted = set(chosen)
        convert_to_float8_training(model, config=Float8LinearConfig(),
                                   module_filter_fn=lambda _m, fqn: fqn in wanted)
    return chosen

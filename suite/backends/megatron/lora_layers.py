"""LoRA adapters on Megatron-core's tensor-parallel linears, injected into a GPTModel by target name (the targets:
suite/backends/megatron/lora.py). peft wraps torch's nn.Linear only; these compute what peft's LoRA computes on an
nn.Linear holding the full weight (tests/backends/test_megatron_lora.py checks outputs and adapter gradients at
tp=2 and a whole model against peft on transformers), split over the tensor-parallel group as the base weight is:

- beside a ColumnParallelLinear (output split over tp; linear_qkv, linear_fc1): A (r x in) on every rank, B this
  rank's rows of the output (out/tp x r). The r-wide product A x passes Megatron's copy_to_tensor_model_parallel_region,
  whose backward all-reduces its gradient: A's gradient and the input's gradient through the adapter then sum over
  every output shard and are the same on every rank.
- beside a RowParallelLinear (input split over tp; linear_proj, linear_fc2): A this rank's columns (r x in/tp), its
  partial product all-reduced (reduce_from_tensor_model_parallel_region), B (out x r) on every rank.

y = base(x) + B A dropout(x) x alpha/r, B zero at the start (the model is the base until the first step), A as peft
draws it (Kaiming-uniform over the full input width, from a generator seeded by the run's seed, the layer's global
number and the target, so every rank and every tp/pp layout holds the same adapters). The adapter is a child
module `adapter` of the base linear, added to its output by a forward hook: every Megatron name stays as it was.
Dropout: the column adapter's input is the same on every tp rank and uses the default generator (the same masks
everywhere, as A's replicas need); the row adapter's input is a shard and uses Megatron's tensor-parallel RNG.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core import tensor_parallel
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes
from megatron.core.tensor_parallel.mappings import (
    copy_to_tensor_model_parallel_region,
    reduce_from_tensor_model_parallel_region,
)
from torch import nn

from suite.backends.megatron.lora import ATTENTION, MLP, megatron_targets

ORDER = ATTENTION + MLP


class _Adapter(nn.Module):
    def __init__(self, a: torch.Tensor, b_shape: tuple[int, int], alpha: float, rank: int, dropout: float,
                 tp_group: Any):
        super().__init__()
        self.lora_A = nn.Parameter(a)
        self.lora_B = nn.Parameter(a.new_zeros(b_shape))
        self.scaling = alpha / rank
        self.dropout = dropout
        self.tp_group = tp_group


class ColumnParallelLoRA(_Adapter):
    """The adapter of a ColumnParallelLinear: this rank's output shard of B A dropout(x) x scaling."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.linear(F.dropout(x, self.dropout, self.training), self.lora_A)
        h = copy_to_tensor_model_parallel_region(h, group=self.tp_group)  # backward: all-reduce over tp
        return F.linear(h, self.lora_B) * self.scaling


class RowParallelLoRA(_Adapter):
    """The adapter of a RowParallelLinear: its input is this rank's shard; the output is whole on every rank."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dropout and self.training and self.tp_group.size() > 1:
            with tensor_parallel.get_cuda_rng_tracker().fork():  # each shard its own masks
                x = F.dropout(x, self.dropout, True)
        else:
            x = F.dropout(x, self.dropout, self.training)
        h = reduce_from_tensor_model_parallel_region(F.linear(x, self.lora_A), group=self.tp_group)
        return F.linear(h, self.lora_B) * self.scaling


def _add_adapter(module: Any, args: tuple, kwargs: dict, output: tuple) -> tuple:
    x = args[0] if args else kwargs["input_"]
    out, bias = output
    return out + module.adapter(x), bias


def attach(base: Any, lora: Any, generator: torch.Generator) -> _Adapter:
    """An adapter beside one Megatron parallel linear (its weight frozen by the caller), A drawn from `generator`."""
    name = type(base).__name__
    if getattr(base, "sequence_parallel", False):
        raise ValueError(f"parallel.sp: the LoRA adapter of this {name} takes the full sequence; set parallel.sp=false")
    if getattr(base, "explicit_expert_comm", False):
        raise ValueError(f"lora.target_modules: {name} is an expert's layer; adapters on experts are not implemented")
    group = base.tp_group
    tp, tp_rank = group.size(), group.rank()
    weight = base.weight
    a_full = torch.empty(lora.rank, base.input_size, dtype=torch.float32)
    nn.init.kaiming_uniform_(a_full, a=math.sqrt(5), generator=generator)  # peft's A: nn.Linear's default init
    adapter: _Adapter
    if isinstance(base, ColumnParallelLinear):
        if base.gather_output:
            raise ValueError(f"LoRA on a {name} that gathers its output is not implemented")
        adapter = ColumnParallelLoRA(a_full.to(weight.dtype), (base.output_size_per_partition, lora.rank),
                                     lora.alpha, lora.rank, lora.dropout, group)
        set_tensor_model_parallel_attributes(adapter.lora_B, True, 0, 1)
    elif isinstance(base, RowParallelLinear):
        if not base.input_is_parallel:
            raise ValueError(f"LoRA on a {name} that scatters its own input is not implemented")
        a_local = a_full.chunk(tp, dim=1)[tp_rank].contiguous()
        adapter = RowParallelLoRA(a_local.to(weight.dtype), (base.output_size, lora.rank), lora.alpha, lora.rank,
                                  lora.dropout, group)
        set_tensor_model_parallel_attributes(adapter.lora_A, True, 1, 1)
    else:
        raise TypeError(f"LoRA under Megatron targets ColumnParallelLinear and RowParallelLinear, not {name} "
                        "(the local layer spec builds those)")
    adapter.to(weight.device)
    base.adapter = adapter
    base.register_forward_hook(_add_adapter, with_kwargs=True)
    return adapter


def inject(gpt: nn.Module, lora: Any, seed: int = 0) -> list[str]:
    """Freeze every parameter of a Megatron GPTModel (this pipeline stage's) and attach adapters to the targets of
    each of its transformer layers; returns the adapted modules' names."""
    targets = megatron_targets(lora)
    for p in gpt.parameters():
        p.requires_grad_(False)
    adapted: list[str] = []
    decoder: Any = gpt.decoder
    for index, layer in enumerate(decoder.layers):
        for target in targets:
            owner = layer.self_attention if target in ATTENTION else layer.mlp
            base = getattr(owner, target, None)
            if base is None:
                raise ValueError(f"lora.target_modules: layer {layer.layer_number} has no {target} (a Mixture-of-"
                                 f"Experts layer's MLP is its experts): adapters there are not implemented")
            # the same A for this layer and target in every layout: seeded by the layer's global number
            g = torch.Generator().manual_seed(seed * 1_000_003 + int(layer.layer_number) * 16 + ORDER.index(target))
            attach(base, lora, g)
            adapted.append(f"decoder.layers.{index}.{'self_attention' if target in ATTENTION else 'mlp'}.{target}")
    return adapted


def adapter_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [p for n, p in model.named_parameters() if ".adapter.lora_" in n]

"""The Megatron LoRA adapters (suite/backends/megatron/lora_layers.py) at tp=2 on the inputs that `inputs` draws, for a
ColumnParallelLinear and a RowParallelLinear: their outputs, adapter gradients (gathered over tp) and the input's
gradient; then the same with each adapter's tp collective removed. Two gloo ranks started by
tests/backends/test_megatron_lora.py, which compares their tensors with `peft_reference` (peft's LoRA on an nn.Linear
holding the full weight) in its own process: the ranks import neither peft nor transformers.

    RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=p python -m support.megatron_lora_tp OUT.pt  (r = 0, 1)
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch import nn

RANK, ALPHA, SEQ, BATCH, NARROW, WIDE = 4, 8, 5, 3, 16, 24


class _Holder(nn.Module):
    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        with torch.no_grad():
            self.lin.weight.copy_(weight)


def _peft(weight, a, b, x, upstream) -> dict[str, torch.Tensor]:
    """peft's LoRA on nn.Linear(full weight): output, A/B gradients, input gradient for loss = sum(y * upstream)."""
    import peft

    holder = peft.inject_adapter_in_model(
        peft.LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=["lin"], bias="none"),
        _Holder(weight))
    layer = holder.lin
    layer.base_layer.weight.requires_grad_(False)
    with torch.no_grad():
        layer.lora_A["default"].weight.copy_(a)
        layer.lora_B["default"].weight.copy_(b)
    x = x.clone().requires_grad_(True)
    y = holder.lin(x)
    (y * upstream).sum().backward()
    return {"y": y.detach(), "A": layer.lora_A["default"].weight.grad, "B": layer.lora_B["default"].weight.grad,
            "x": x.grad}


def _gather(t: torch.Tensor, dim: int) -> torch.Tensor:
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts, dim=dim)


def _megatron(kind: str, weight, a, b, x, upstream) -> dict[str, torch.Tensor]:
    from megatron.core import ModelParallelConfig
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    from suite.backends.megatron import lora_layers as megatron_lora_layers
    from suite.models.common.configs import LoraConfig

    tp, rank = dist.get_world_size(), dist.get_rank()
    cfg = ModelParallelConfig(tensor_model_parallel_size=tp, use_cpu_initialization=True,
                              perform_initialization=False, gradient_accumulation_fusion=False)
    out_size, in_size = weight.shape
    column = kind == "column"
    if column:
        base = ColumnParallelLinear(in_size, out_size, config=cfg, init_method=nn.init.zeros_, bias=False,
                                    gather_output=False)
    else:
        base = RowParallelLinear(in_size, out_size, config=cfg, init_method=nn.init.zeros_, bias=False,
                                 input_is_parallel=True, skip_bias_add=False)
    with torch.no_grad():
        base.weight.copy_(weight.chunk(tp, dim=0 if column else 1)[rank])
    base.weight.requires_grad_(False)
    lora = LoraConfig(rank=RANK, alpha=ALPHA, dropout=0.0, target_modules=["linear_qkv"])
    adapter = megatron_lora_layers.attach(base, lora, torch.Generator().manual_seed(0))
    with torch.no_grad():  # this rank's shards of the full A and B
        adapter.lora_A.copy_(a if column else a.chunk(tp, dim=1)[rank])
        adapter.lora_B.copy_(b.chunk(tp, dim=0)[rank] if column else b)
    x_in = (x if column else x.chunk(tp, dim=-1)[rank]).clone().requires_grad_(True)
    y, bias = base(x_in)
    assert bias is None
    ((y * (upstream.chunk(tp, dim=-1)[rank] if column else upstream)).sum()).backward()
    if column:  # output and B split by output rows; A (and the input) whole on every rank
        return {"y": _gather(y.detach(), -1), "A": adapter.lora_A.grad, "B": _gather(adapter.lora_B.grad, 0),
                "x": x_in.grad}
    return {"y": y.detach(), "A": _gather(adapter.lora_A.grad, 1), "B": adapter.lora_B.grad, "x": _gather(x_in.grad, -1)}


def inputs(kind: str) -> tuple[torch.Tensor, ...]:
    """weight (out x in), A, B (non-zero), x [seq, batch, in], the loss's upstream gradient: the same on every rank."""
    g = torch.Generator().manual_seed(7)
    in_size, out_size = (NARROW, WIDE) if kind == "column" else (WIDE, NARROW)
    weight = 0.2 * torch.randn(out_size, in_size, generator=g)
    a, b = 0.3 * torch.randn(RANK, in_size, generator=g), 0.3 * torch.randn(out_size, RANK, generator=g)
    return weight, a, b, torch.randn(SEQ, BATCH, in_size, generator=g), torch.randn(SEQ, BATCH, out_size, generator=g)


def peft_reference(kind: str) -> dict[str, torch.Tensor]:
    return _peft(*inputs(kind))


def main(out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    from megatron.core import parallel_state

    from suite.backends.megatron import lora_layers as megatron_lora_layers
    from suite.backends.megatron.cpu import CpuShim

    shim = CpuShim()
    shim.install()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=dist.get_world_size())
    try:
        result = {kind: _megatron(kind, *inputs(kind)) for kind in ("column", "row")}
        # each adapter without its tp collective: the comparison must see it
        copy, reduce = (megatron_lora_layers.copy_to_tensor_model_parallel_region,
                        megatron_lora_layers.reduce_from_tensor_model_parallel_region)
        megatron_lora_layers.copy_to_tensor_model_parallel_region = lambda h, group=None: h
        result["column_without_all_reduce"] = _megatron("column", *inputs("column"))
        megatron_lora_layers.copy_to_tensor_model_parallel_region = copy
        megatron_lora_layers.reduce_from_tensor_model_parallel_region = lambda h, group=None: h
        result["row_without_all_reduce"] = _megatron("row", *inputs("row"))
        megatron_lora_layers.reduce_from_tensor_model_parallel_region = reduce
        per_rank: list = [None] * dist.get_world_size()
        dist.all_gather_object(per_rank, result)
        if dist.get_rank() == 0:
            torch.save(per_rank, out)
    finally:
        parallel_state.destroy_model_parallel()
        shim.remove()
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])

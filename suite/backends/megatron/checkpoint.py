"""The megatron backend's checkpoints (`--checkpoint-every`): Megatron's own `dist_checkpointing` (its `torch_dist`
strategy over DCP), the model as GPTModel's `sharded_state_dict` (TP and PP offsets included) and the optimizer
sharded beside it with Megatron's `optim_state_to_sharding_state`, as its FP32Optimizer does.

On CPU the backend trains with a torch optimizer (Megatron's optimizers hard-code CUDA): its parameter-shaped state
(Adam's moments, momentum buffers) is sharded like the parameter it belongs to; what is not parameter-shaped (Adam's
`step` counts) and Megatron's model-parallel RNG tracker states (dropout under TP) go into a small per-rank file
beside it, which the load reads first to build the template `dist_checkpointing.load` fills. On CUDA the backend's
optimizer is Megatron's own, whose sharded_state_dict path is not wired here: refused, named.

dist_checkpointing's saver starts a multiprocessing manager (a spawned process): the run's main module must be
importable without side effects, as `trainbench`'s is. Imports Megatron: only the backend calls this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

FOLDER = "megatron"  # inside the harness's step folder


def _params(optimizer: Any) -> list[nn.Parameter]:
    return [p for g in optimizer.param_groups for p in g["params"]]


def _torch_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"checkpoint: the megatron backend checkpoints a torch optimizer (its CPU path); this run's "
                         f"optimizer is Megatron's {type(optimizer).__name__}, whose sharded_state_dict is not wired")
    return optimizer


def _sharded(gpt: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any], shaped: dict[int, list[str]]
             ) -> dict[str, Any]:
    """The sharded state dict of the model and of `state` (an optimizer state dict holding only `shaped` keys)."""
    from megatron.core.dist_checkpointing.optimizer import (
        get_param_id_to_sharded_param_map,
        optim_state_to_sharding_state,
    )

    model = gpt.sharded_state_dict()  # type: ignore[operator]  # GPTModel's (nn.Module's type hides it)
    state["state"] = {pid: {k: v for k, v in s.items() if k in shaped.get(pid, [])} for pid, s in state["state"].items()}
    optim_state_to_sharding_state(state, get_param_id_to_sharded_param_map(model, _params(optimizer)))
    return {"model": model, "optimizer": state}


def save(folder: Path, rank: int, gpt: nn.Module, optimizer: Any) -> None:
    from megatron.core import dist_checkpointing, tensor_parallel

    opt = _torch_optimizer(optimizer)
    params = _params(opt)
    full = opt.state_dict()
    shaped = {pid: [k for k, v in s.items() if torch.is_tensor(v) and v.shape == params[pid].shape]
              for pid, s in full["state"].items()}
    rest = {pid: {k: v for k, v in s.items() if k not in shaped[pid]} for pid, s in full["state"].items()}
    torch.save({"shaped": shaped, "rest": rest, "rng_tracker": tensor_parallel.get_cuda_rng_tracker().get_states()},
               folder / f"megatron-rank{rank}.pt")
    (folder / FOLDER).mkdir(parents=True, exist_ok=True)  # dist_checkpointing wants it there (and empty)
    dist_checkpointing.save(_sharded(gpt, opt, full, shaped), str(folder / FOLDER))


def load(folder: Path, rank: int, gpt: nn.Module, optimizer: Any) -> None:
    from megatron.core import dist_checkpointing, tensor_parallel

    opt = _torch_optimizer(optimizer)
    params = _params(opt)
    side = torch.load(folder / f"megatron-rank{rank}.pt", weights_only=False)  # noqa: S614 - our own file
    shaped: dict[int, list[str]] = side["shaped"]
    template = opt.state_dict()  # a fresh optimizer: no state yet; its param_groups are the run's own
    template["state"] = {pid: {k: torch.zeros_like(params[pid]) for k in keys} for pid, keys in shaped.items()}
    loaded = dist_checkpointing.load(_sharded(gpt, opt, template, shaped), str(folder / FOLDER))
    gpt.load_state_dict(loaded["model"])
    state = loaded["optimizer"]
    state["state"] = {pid: {**state["state"].get(pid, {}), **side["rest"].get(pid, {})}
                      for pid in set(state["state"]) | set(side["rest"])}
    opt.load_state_dict(state)
    tensor_parallel.get_cuda_rng_tracker().set_states(side["rng_tracker"])

"""torchtitan's own pipeline (`torchtitan.distributed.pipeline_parallel.pipeline_llm`) on its Llama 3 / DeepSeek-V3
model, wired to the workload's loss: the torchtitan backend's `--parallel pp=N` (suite/backends/torchtitan/backend.py).

pipeline_llm splits the model by module names into stages (embeddings with the first layers, the norm and head
with the last; `pipeline_parallel_first/last_stage_less_layers` 0: the layers split as evenly as torchtitan
does), applies torchtitan's parallelize function to each part and builds the schedule from the spec's
(`gpipe` -> GPipe, `1f1b` -> 1F1B, `interleaved` -> Interleaved1F1B with two stages per rank). Its loss function
is the workload's own loss on the last stage's logits, divided by the micro-batches (torchtitan's schedules do
not scale gradients: `scale_grads=False`) and, under ep, by the data-parallel ranks (torchtitan's FSDP sums). Evaluation runs on a whole copy of the model every rank keeps, each
parameter broadcast over pp from the rank whose part trains it.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B"}


def _name(name: str) -> str:
    """A part's parameter name as the whole model names it: activation checkpointing and compile wrap each layer
    (`_checkpoint_wrapped_module.`, `_orig_mod.`)."""
    return name.replace("_checkpoint_wrapped_module.", "").replace("_orig_mod.", "")


def _full(t: torch.Tensor) -> torch.Tensor:
    full = getattr(t, "full_tensor", None)
    return full() if full is not None else t


class TitanPipeline:
    """This rank's model parts and torchtitan's schedule; `step(batch)` runs every micro-batch."""

    def __init__(self, model: nn.Module, model_config: Any, dims: Any, parallelism: Any, training: Any,
                 compile_config: Any, ac_config: Any, parallelize_fn: Any, device: torch.device, n_micro: int,
                 workload_loss: Any, data_parallel: int = 1):
        from torchtitan.distributed.pipeline_parallel import pipeline_llm

        self.whole = copy.deepcopy(model)  # the evaluation copy, before pipeline_llm deletes this rank's others
        self.n_micro = n_micro
        # the ep ranks' dense parameters are FSDP-sharded by torchtitan, which sums their gradients
        # (disable_fsdp_gradient_division): each rank's loss carries 1 / (micro-batches x data-parallel ranks)
        self.scale = n_micro * data_parallel
        self.data_parallel = data_parallel

        def loss_fn(pred: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, None]:
            return workload_loss(lambda _x: pred, (None, target)) / self.scale, None

        self.schedule, self.parts, self.first, self.last = pipeline_llm(
            model, parallel_dims=dims, training=training, parallelism=parallelism, compile_config=compile_config,
            ac_config=ac_config, dump_folder="", device=device, model_config=model_config,
            parallelize_fn=parallelize_fn, loss_fn=loss_fn)
        self.pp_mesh = dims.get_mesh("pp")
        self.ep_enabled = bool(dims.ep_enabled)  # expert and dense parameters live on two meshes: the norm joins both
        self.group = self.pp_mesh.get_group()
        # which pp rank trains each parameter of the whole model (its part keeps the whole model's names)
        mine = sorted({_name(name) for part in self.parts for name, _ in part.named_parameters()})
        every: list[Any] = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(every, mine, group=self.group)
        self.owner = {name: rank for rank, names in enumerate(every) for name in names}

    def parameters(self) -> list[nn.Parameter]:
        return [p for part in self.parts for p in part.parameters() if p.requires_grad]

    def step(self, batch: Any) -> torch.Tensor:
        x, y = batch
        losses: list[torch.Tensor] = []
        self.schedule.step(*((x,) if self.first else ()), target=y if self.last else None,
                           losses=losses if self.last else None)
        # each micro-batch's loss came back divided by the micro-batches (and data-parallel ranks): their sum
        # (times the data-parallel ranks) is this rank's batch mean
        loss = (torch.stack([_full(v.detach()).float() for v in losses]).sum() * self.data_parallel if self.last
                else torch.zeros(()))
        dist.all_reduce(loss, group=self.group)  # every stage learns the loss
        return loss

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        from torchtitan.distributed import utils as dist_utils

        return dist_utils.clip_grad_norm_(self.parameters(), max_norm, foreach=True, pp_mesh=self.pp_mesh,
                                        ep_enabled=self.ep_enabled)

    @torch.no_grad()
    def sync_for_eval(self) -> nn.Module:
        mine = {_name(name): p for part in self.parts for name, p in part.named_parameters()}
        for name, p in self.whole.named_parameters():
            if name not in self.owner:  # in no stage: pipeline_llm's split leaves none out (a split that does is
                continue  # tests/backends/test_torchtitan_pp_ep.py's negative control: its initial weights stay)
            if name in mine:
                p.copy_(_full(mine[name]))
            dist.broadcast(p.data, src=dist.get_global_rank(self.group, self.owner[name]), group=self.group)
        return self.whole

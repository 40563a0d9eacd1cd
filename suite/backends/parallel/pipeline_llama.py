"""Pipeline parallelism of the Llama-class decoder (suite/models/llama/model.py, dense or Mixture-of-Experts) with
`torch.distributed.pipelining`: schedules GPipe, 1F1B and interleaved 1F1B, alone or with dp and ep.

The decoder is cut by layers into stages (`stage_bounds`: an even split, the remainder spread over the first
stages, or Megatron's uneven split with given first/last stage counts). Under `schedule: interleaved` each rank
holds two stages (torch's `ScheduleInterleaved1F1B` needs at least two per rank), loop style: stage s on rank
s % pp. Stage 0 owns the token embeddings, the last stage the final norm and the output head; the workload's own
loss runs on the last stage's logits (the backend's `loss_fn`). Every stage computes its rotary tables itself.

What the schedule does not do, done here:
- gradients are averaged over the ranks that read different data at the same stage: dense parameters over
  (dp, ep), experts (split over ep, suite/backends/parallel/expert.py) over dp, divided by dp x ep (each
  rank's expert gradient already sums the ep group's local losses), so a step is one process's update;
- a Mixture-of-Experts layer's load-balancing loss joins the gradient at scale 1: the schedule divides every
  gradient by the micro-batches afterwards, the balancing loss's included;
- gradient clipping takes the norm over every stage and expert shard;
- evaluation runs on the plain whole model every rank keeps (never parallelised): before an evaluation the
  experts are gathered over ep and each parameter broadcast over pp from the rank whose stage trains it.
Not implemented here (refused before anything starts): tp or fsdp with a pipelined Llama, tied embeddings.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from suite.backends.layout import Layout
from suite.backends.parallel import checkpoint, expert
from suite.backends.parallel.refusals import STAGES_PER_RANK
from suite.models.common import moe

_WRAPPERS = ("_checkpoint_wrapped_module.", "_orig_mod.")  # name parts added by checkpoint_wrapper / compile


def stage_bounds(n_layer: int, stages: int, first: int | None = None, last: int | None = None) -> list[range]:
    """The layers of each stage. Without `first`/`last`: an even split, the first n_layer % stages stages one layer
    longer. With them (Megatron-core's num_layers_in_first/last_pipeline_stage): the first and last stage hold
    that many and the stages between split the rest evenly, which they must divide."""
    if stages < 1 or n_layer < stages:
        raise ValueError(f"{stages} pipeline stages for {n_layer} layers: each stage needs at least one layer")
    if first is None and last is None:
        base, extra = divmod(n_layer, stages)
        sizes = [base + (s < extra) for s in range(stages)]
    else:
        head, tail = first or 0, last or 0
        middle = stages - (first is not None) - (last is not None)
        rest = n_layer - head - tail
        if rest < 0 or (middle and rest % middle) or (not middle and rest):
            raise ValueError(f"first stage {first}, last stage {last}: the other {max(rest, 0)} of {n_layer} layers "
                             f"do not split evenly over the {middle} stages between")
        sizes = ([head] if first is not None else []) + [rest // middle if middle else 0] * middle \
            + ([tail] if last is not None else [])
        if min(sizes) < 1:
            raise ValueError(f"stage sizes {sizes}: each of the {stages} stages needs at least one layer")
    starts = [sum(sizes[:s]) for s in range(stages)]
    return [range(a, a + n) for a, n in zip(starts, sizes, strict=True)]


def is_llama(model: nn.Module) -> bool:
    from suite.models.llama.model import Llama

    return isinstance(model, Llama)


def pp_unsupported(model: nn.Module, layout: Layout) -> str | None:
    stages = layout.pp * STAGES_PER_RANK[layout.schedule]
    if len(model.layers) < stages:  # type: ignore[arg-type]
        return f"parallel.pp={layout.pp} ({layout.schedule}) is {stages} stages, more than {len(model.layers)} layers"  # type: ignore[arg-type]
    if model.output.weight is model.tok_embeddings.weight:  # type: ignore[union-attr]
        return "parallel.pp with tied embeddings is wired for the GPT only"
    if layout.tp > 1 or layout.fsdp > 1:
        return "parallel.pp with tp or fsdp on the Llama decoder is not implemented (dp and ep compose with pp)"
    return None


class LlamaStage(nn.Module):
    """One pipeline stage: the decoder's layers `layers` (the token embeddings first, the norm and head last)."""

    def __init__(self, llama: Any, layers: range, first: bool, last: bool):
        super().__init__()
        self.first, self.last = first, last
        self.tok_embeddings: Any = llama.tok_embeddings if first else None
        self.rotary: Any = llama.rotary
        self.layers = nn.ModuleList(llama.layers[i] for i in layers)
        self.norm: Any = llama.norm if last else None
        self.output: Any = llama.output if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            x = self.tok_embeddings(x)
        cos, sin = self.rotary(x.shape[1], x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        if self.last:
            x = self.output(self.norm(x))
        return x


class LlamaPipeline:
    """This rank's stages and schedule; `step(batch)` runs forward and backward of all micro-batches. The same
    surface as suite/backends/parallel/pipeline.py's `Pipeline` (parameters, step, clip_grad_norm,
    sync_for_eval), which the torch backend drives."""

    def __init__(self, model: nn.Module, mesh: Any, layout: Layout, n_micro: int, device: torch.device,
                 loss_fn: Any, compile: bool = False):
        from torch.distributed.pipelining import (
            PipelineStage,
            Schedule1F1B,
            ScheduleGPipe,
            ScheduleInterleaved1F1B,
        )

        if layout.schedule != "gpipe" and n_micro < layout.pp:
            raise ValueError(f"parallel.schedule {layout.schedule} with pp={layout.pp} needs at least {layout.pp} "
                             f"micro-batches per step, and this rank's batch is {n_micro}: lower "
                             "data.micro_batch_size (or use schedule=gpipe)")
        self.model, self.layout = model, layout
        self.group = mesh.get_group("pp")
        self.rank = mesh.get_local_rank("pp")
        per_rank = STAGES_PER_RANK[layout.schedule]
        self.n_stages = layout.pp * per_rank
        self.bounds = stage_bounds(len(model.layers), self.n_stages)  # type: ignore[arg-type]
        self.stage_ids = [self.rank + k * layout.pp for k in range(per_rank)]  # loop style: stage s on s % pp
        self.first, self.last = 0 in self.stage_ids, self.n_stages - 1 in self.stage_ids
        self.modules = [copy.deepcopy(LlamaStage(model, self.bounds[s], s == 0, s == self.n_stages - 1))
                        for s in self.stage_ids]
        self.ep_group = mesh["ep"].get_group() if layout.ep > 1 else None
        for module in self.modules:
            if self.ep_group is not None:
                expert.apply_ep(module, mesh["ep"])
                mark_experts([module])
            checkpoint.apply_ac(module, layout.ac)
            if compile:
                for layer in module.layers:
                    layer.compile()
        # the ranks at this stage that read other data: (dp, ep) for dense parameters, dp for the experts
        dims = [d for d in ("dp", "ep") if getattr(layout, d) > 1]
        self.dense_group = self._group(mesh, dims)
        self.expert_group = self._group(mesh, ["dp"] if layout.dp > 1 else [])
        stages: list[Any] = [PipelineStage(m, s, self.n_stages, device, group=self.group)
                  for m, s in zip(self.modules, self.stage_ids, strict=True)]
        if layout.schedule == "interleaved":
            self.schedule: Any = ScheduleInterleaved1F1B(list(stages), n_microbatches=n_micro, loss_fn=loss_fn)
        else:
            cls = ScheduleGPipe if layout.schedule == "gpipe" else Schedule1F1B
            self.schedule = cls(stages[0], n_microbatches=n_micro, loss_fn=loss_fn)

    @staticmethod
    def _group(mesh: Any, dims: list[str]) -> Any:
        if not dims:
            return None
        return mesh[dims[0]].get_group() if len(dims) == 1 else mesh[tuple(dims)]._flatten().get_group()

    def parameters(self) -> list[nn.Parameter]:
        return [p for m in self.modules for p in m.parameters() if p.requires_grad]

    def step(self, batch: Any) -> torch.Tensor:
        x, y = batch
        moe.set_aux_loss_grad_scale(1.0)  # the schedule scales every gradient by 1 / micro-batches afterwards
        losses: list[torch.Tensor] = []
        self.schedule.step(*((x,) if self.first else ()), target=y if self.last else None,
                           losses=losses if self.last else None)
        self._reduce_grads()
        if self.last:
            loss = torch.stack([v.detach().float() for v in losses]).mean()
        else:
            loss = torch.zeros((), device=x.device)
        dist.all_reduce(loss, group=self.group)  # every stage learns the loss (stop rules read it)
        return loss

    @torch.no_grad()
    def _reduce_grads(self) -> None:
        share = self.layout.dp * self.layout.ep
        if share == 1:
            return
        for p in self.parameters():
            if p.grad is None:
                continue
            group = self.expert_group if _is_expert(p) else self.dense_group
            if group is not None:
                dist.all_reduce(p.grad, group=group)
            p.grad /= share

    @torch.no_grad()
    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Scale every stage's gradients so their global L2 norm is at most `max_norm`; returns the norm."""
        params = [p for p in self.parameters() if p.grad is not None]
        dense = torch.zeros((), dtype=torch.float32, device=params[0].device)
        experts = torch.zeros_like(dense)
        for p in params:
            sq = torch.linalg.vector_norm(p.grad, dtype=torch.float32) ** 2
            if _is_expert(p):
                experts += sq
            else:
                dense += sq
        if self.ep_group is not None:  # each ep rank holds other experts; dense gradients are equal over ep
            dist.all_reduce(experts, group=self.ep_group)
        squares = dense + experts
        dist.all_reduce(squares, group=self.group)
        norm = squares.sqrt()
        scale = float(max_norm / (norm + 1e-6))
        if scale < 1.0:
            for p in params:
                p.grad.mul_(scale)  # type: ignore[union-attr]
        return norm

    def _whole_name(self, stage_index: int, stage_name: str) -> str:
        for part in _WRAPPERS:
            stage_name = stage_name.replace(part, "")
        if stage_name.startswith("layers."):
            _, j, rest = stage_name.split(".", 2)
            return f"layers.{self.bounds[stage_index][int(j)]}.{rest}"
        return stage_name

    def _owner(self, name: str) -> int:
        """The pp rank whose stage trains the whole model's parameter `name`."""
        if name.startswith("layers."):
            i = int(name.split(".")[1])
            stage = next(s for s, r in enumerate(self.bounds) if i in r)
        else:
            stage = 0 if name.startswith("tok_embeddings.") else self.n_stages - 1
        return stage % self.layout.pp

    @torch.no_grad()
    def sync_for_eval(self) -> None:
        """Every rank's plain whole model takes each parameter from the stage that trains it (experts gathered)."""
        whole = dict(self.model.named_parameters())
        for stage_index, module in zip(self.stage_ids, self.modules, strict=True):
            for name, p in module.named_parameters():
                value = p.detach()
                if _is_expert(p):
                    parts = [torch.empty_like(value) for _ in range(self.layout.ep)]
                    dist.all_gather(parts, value.contiguous(), group=self.ep_group)
                    value = torch.cat(parts)
                whole[self._whole_name(stage_index, name)].copy_(value)
        for name, p in self.model.named_parameters():
            dist.broadcast(p.data, src=dist.get_global_rank(self.group, self._owner(name)), group=self.group)


def _is_expert(p: torch.Tensor) -> bool:
    return bool(getattr(p, "_pp_expert", False))


def mark_experts(modules: list[nn.Module]) -> None:
    for module in modules:
        for shard in module.modules():
            if isinstance(shard, expert.ExpertShard):
                for p in shard.parameters():
                    p._pp_expert = True  # type: ignore[attr-defined]

"""Pipeline parallelism of the suite GPT with `torch.distributed.pipelining` (GPipe or 1F1B).

The GPT is cut by layers into `pp` stages (stage 0 owns the embeddings, the last the final norm and the LM
head), each rank runs its stage under the chosen schedule; the local batch is cut into the spec's
micro-batches. Gradients are scaled by the schedule (1 / micro-batches), so a step is the same update as
one process over the whole batch. Two things the schedule does not do, done here as Megatron does them:
- a tied embedding lives on the first and last stage: its two gradient halves are summed over the pp group;
- with dp > 1, stage gradients are averaged over the data-parallel group.
Every rank keeps the whole model (for evaluation): before an evaluation each parameter is broadcast from
the stage that trains it (cheap for the models this suite runs on CPU; a large model would evaluate through
the schedule instead).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from suite.backends.layout import Layout


def pp_unsupported(model: nn.Module, layout: Layout) -> str | None:
    if not all(hasattr(model, a) for a in ("wte", "wpe", "blocks", "ln_f", "lm_head")):
        return "pipeline parallelism (parallel.pp > 1) has a stage split for the suite GPT (model.arch gpt) only"
    if len(model.blocks) < layout.pp:  # type: ignore[arg-type]
        return f"parallel.pp={layout.pp} is more stages than model.n_layer={len(model.blocks)}"  # type: ignore[arg-type]
    if layout.fsdp > 1 or layout.tp > 1:
        return "parallel.pp > 1 combines with dp only here (pp with fsdp or tp is not implemented)"
    return None


def stage_layers(n_layer: int, pp: int, stage: int) -> range:
    return range(stage * n_layer // pp, (stage + 1) * n_layer // pp)


class GPTStage(nn.Module):
    """One pipeline stage: the GPT's own modules (shared, not copied) for layers `layers`."""

    def __init__(self, gpt: nn.Module, layers: range, first: bool, last: bool):
        super().__init__()
        self.first, self.last = first, last
        self.wte = gpt.wte if first else None
        self.wpe = gpt.wpe if first else None
        self.blocks = nn.ModuleList(gpt.blocks[i] for i in layers)  # type: ignore[index]
        self.ln_f = gpt.ln_f if last else None
        self.lm_head = gpt.lm_head if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1], device=x.device))  # type: ignore[misc]
        for block in self.blocks:
            x = block(x)
        if self.last:
            x = self.lm_head(self.ln_f(x))  # type: ignore[misc]
        return x


class Pipeline:
    """This rank's stage and schedule; `step(batch)` runs forward and backward of all micro-batches."""

    def __init__(self, model: nn.Module, mesh: Any, layout: Layout, n_micro: int, device: torch.device,
                 loss_fn: Any):
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        self.model, self.layout = model, layout
        self.group = mesh.get_group("pp")
        self.dp_group = mesh.get_group("dp") if layout.dp > 1 else None
        self.rank = mesh.get_local_rank("pp")
        self.first, self.last = self.rank == 0, self.rank == layout.pp - 1
        n_layer = len(model.blocks)  # type: ignore[arg-type]
        self.module = GPTStage(model, stage_layers(n_layer, layout.pp, self.rank), self.first, self.last)
        stage = PipelineStage(self.module, self.rank, layout.pp, device, group=self.group)
        schedule_cls = ScheduleGPipe if layout.schedule == "gpipe" else Schedule1F1B
        self.schedule = schedule_cls(stage, n_microbatches=n_micro, loss_fn=loss_fn)
        self.tied = model.wte.weight if model.lm_head.weight is model.wte.weight else None  # type: ignore[union-attr]
        self.owner = self._owners(n_layer)

    def parameters(self) -> list[nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]

    def _owners(self, n_layer: int) -> dict[str, int]:
        """Parameter name (in the whole model) -> the stage that trains it."""
        owner = {}
        for name, _ in self.model.named_parameters():
            if name.startswith("blocks."):
                i = int(name.split(".")[1])
                owner[name] = next(s for s in range(self.layout.pp) if i in stage_layers(n_layer, self.layout.pp, s))
            else:
                owner[name] = 0 if name.startswith(("wte.", "wpe.")) else self.layout.pp - 1
        return owner

    def step(self, batch: Any) -> torch.Tensor:
        x, y = batch
        losses: list[torch.Tensor] = []
        if self.first:
            self.schedule.step(x, target=y if self.last else None, losses=losses if self.last else None)
        elif self.last:
            self.schedule.step(target=y, losses=losses)
        else:
            self.schedule.step()
        self._reduce_grads()
        loss = torch.stack(losses).float().mean().detach() if self.last else torch.zeros((), device=x.device)
        dist.all_reduce(loss, group=self.group)  # every stage learns the loss (stop rules read it)
        return loss

    @torch.no_grad()
    def _reduce_grads(self) -> None:
        if self.tied is not None and self.layout.pp > 1:
            if self.tied.grad is None:
                self.tied.grad = torch.zeros_like(self.tied)
            dist.all_reduce(self.tied.grad, group=self.group)
        if self.dp_group is not None:
            for p in self.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad, group=self.dp_group)
                    p.grad /= self.layout.dp

    @torch.no_grad()
    def sync_for_eval(self) -> None:
        """Every rank's copy of the whole model takes each parameter from the stage that trains it."""
        for name, p in self.model.named_parameters():
            dist.broadcast(p.data, src=dist.get_global_rank(self.group, self.owner[name]), group=self.group)

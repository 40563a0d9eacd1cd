"""Pipeline parallelism of the suite GPT with `torch.distributed.pipelining` (GPipe or 1F1B), alone or with TP
and FSDP2 inside each stage (torchtitan's 3-D layouts, over one DeviceMesh).

The GPT is cut by layers into `pp` stages (stage 0 owns the embeddings, the last the final norm and the LM
head). Each rank builds its stage as a copy of those modules (`GPTStage`), the backend applies TP (over the
mesh's "tp" sub-mesh), activation checkpointing, per-block compile and FSDP2 (over "fsdp", or ("dp", "fsdp")
for HSDP) to that copy, as torchtitan does per stage, and the stage runs under the chosen schedule over the
"pp" group; the local batch is cut into the spec's micro-batches. Gradients are scaled by the schedule
(1 / micro-batches), so a step is the same update as one process over the whole batch. What the schedule
does not do, done here as Megatron does it:
- a tied embedding lives on the first and the last stage: their two gradients are summed between the two
  (point to point). The pp group joins ranks of equal (dp, fsdp, tp) coordinates, so under TP or FSDP the
  two local shards hold the same rows;
- with dp > 1 and no FSDP, stage gradients are averaged over the dp group (with FSDP, HSDP does it);
- gradient clipping takes the norm over every stage (each parameter's DTensor norm, then summed over pp,
  the tied weight counted once).
Evaluation runs on a plain whole-model copy on every rank (the model as built, never parallelised): before
an evaluation each stage's parameters are gathered (`full_tensor()`, the TP row regrouping undone) into it
and broadcast over pp from the stage that trains them (cheap for the models this suite runs on CPU; a large
model would evaluate through the schedule instead).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from suite.backends.layout import Layout
from suite.backends.parallel import tensor

_WRAPPERS = ("_checkpoint_wrapped_module.", "_orig_mod.")  # name parts added by checkpoint_wrapper / compile


def pp_unsupported(model: nn.Module, layout: Layout) -> str | None:
    if not all(hasattr(model, a) for a in ("wte", "wpe", "blocks", "ln_f", "lm_head")):
        return ("pipeline parallelism (parallel.pp > 1) has stage splits for the suite GPT and the Llama decoder "
                "(model.arch gpt, llama) only")
    if layout.schedule == "interleaved":
        return "parallel.schedule interleaved is wired for the Llama decoder (suite/backends/parallel/pipeline_llama.py)"
    if len(model.blocks) < layout.pp:  # type: ignore[arg-type]
        return f"parallel.pp={layout.pp} is more stages than model.n_layer={len(model.blocks)}"  # type: ignore[arg-type]
    return None


def stage_layers(n_layer: int, pp: int, stage: int) -> range:
    return range(stage * n_layer // pp, (stage + 1) * n_layer // pp)


class GPTStage(nn.Module):
    """One pipeline stage: the GPT's modules for layers `layers` (the embeddings first, the head last)."""

    def __init__(self, gpt: nn.Module, layers: range, first: bool, last: bool):
        super().__init__()
        self.first, self.last = first, last
        self.wte = gpt.wte if first else None
        self.wpe = gpt.wpe if first else None
        self.blocks = nn.ModuleList(gpt.blocks[i] for i in layers)  # type: ignore[index]
        self.ln_f = gpt.ln_f if last else None
        self.lm_head = gpt.lm_head if last else None

    def forward(self, x: torch.Tensor) -> Any:
        if self.first:
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1], device=x.device))  # type: ignore[misc]
        for block in self.blocks:
            x = block(x)
        if self.last:
            x = self.lm_head(self.ln_f(x))  # type: ignore[misc]
        return x


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (the same storage), or the tensor itself."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def _full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def _align_grad(p: torch.Tensor) -> None:
    """A DTensor parameter's gradient in the parameter's own placements (the embedding's backward gives a
    replicated gradient of a row-sharded weight), so local shards of equal coordinates hold the same rows."""
    from torch.distributed.tensor import DTensor

    if isinstance(p, DTensor) and isinstance(p.grad, DTensor) and p.grad.placements != p.placements:
        p.grad = p.grad.redistribute(p.device_mesh, p.placements)


class Pipeline:
    """This rank's stage and schedule; `step(batch)` runs forward and backward of all micro-batches.

    `parallelize(stage)` applies TP / AC / compile / FSDP to the stage module in place (the backend's plan)
    and says whether FSDP (which then reduces over dp itself) was applied."""

    def __init__(self, model: nn.Module, mesh: Any, layout: Layout, n_micro: int, device: torch.device,
                 loss_fn: Any, parallelize: Callable[[nn.Module], bool] | None = None):
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        self.model, self.layout = model, layout
        self.group = mesh.get_group("pp")
        self.rank = mesh.get_local_rank("pp")
        self.first, self.last = self.rank == 0, self.rank == layout.pp - 1
        n_layer = len(model.blocks)  # type: ignore[arg-type]
        self.layers = stage_layers(n_layer, layout.pp, self.rank)
        self.module = copy.deepcopy(GPTStage(model, self.layers, self.first, self.last))
        sharded = parallelize(self.module) if parallelize is not None else False
        self.dp_group = mesh.get_group("dp") if layout.dp > 1 and not sharded else None
        stage = PipelineStage(self.module, self.rank, layout.pp, device, group=self.group)
        schedule_cls = ScheduleGPipe if layout.schedule == "gpipe" else Schedule1F1B
        self.schedule = schedule_cls(stage, n_microbatches=n_micro, loss_fn=loss_fn)
        self.tied = model.lm_head.weight is model.wte.weight  # type: ignore[union-attr]
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

    def _whole_name(self, stage_name: str) -> str:
        """A stage parameter's name in the whole model (local block index -> layer, wrappers dropped)."""
        for part in _WRAPPERS:
            stage_name = stage_name.replace(part, "")
        if stage_name.startswith("blocks."):
            _, j, rest = stage_name.split(".", 2)
            return f"blocks.{self.layers[int(j)]}.{rest}"
        return stage_name

    def _tied_param(self) -> nn.Parameter | None:
        if not self.tied or not (self.first or self.last):
            return None
        return self.module.wte.weight if self.first else self.module.lm_head.weight  # type: ignore[union-attr]

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
        if self.last:  # under loss parallel each micro-batch's loss is a replicated DTensor
            loss = torch.stack([tensor.gathered(v).float() for v in losses]).mean().detach()
        else:
            loss = torch.zeros((), device=x.device)
        dist.all_reduce(loss, group=self.group)  # every stage learns the loss (stop rules read it)
        return loss

    @torch.no_grad()
    def _reduce_grads(self) -> None:
        tied = self._tied_param()
        if tied is not None:  # first <-> last stage: each adds the other's gradient (same shard rows)
            _align_grad(tied)
            grad = _local(tied.grad) if tied.grad is not None else torch.zeros_like(_local(tied))
            peer = dist.get_global_rank(self.group, self.layout.pp - 1 if self.first else 0)
            other = torch.empty_like(grad)
            ops = [dist.P2POp(dist.isend, grad.clone(), peer, self.group),
                   dist.P2POp(dist.irecv, other, peer, self.group)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            grad += other
        if self.dp_group is not None:
            for p in self.parameters():
                if p.grad is not None:
                    _align_grad(p)
                    g = _local(p.grad)
                    dist.all_reduce(g, group=self.dp_group)
                    g /= self.layout.dp

    @torch.no_grad()
    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Scale every stage's gradients so their global L2 norm is at most `max_norm`; returns the norm."""
        tied = self._tied_param() if self.last else None  # counted once: on the first stage
        params = self.parameters()
        squares = torch.zeros((), device=_local(params[0]).device)
        for p in params:
            if p.grad is not None and p is not tied:
                squares += _full(torch.linalg.vector_norm(p.grad, dtype=torch.float32)) ** 2
        dist.all_reduce(squares, group=self.group)
        norm = squares.sqrt()
        scale = float(max_norm / (norm + 1e-6))
        if scale < 1.0:
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(scale)
        return norm

    @torch.no_grad()
    def sync_for_eval(self) -> None:
        """Every rank's plain copy of the whole model takes each parameter from the stage that trains it."""
        whole = dict(self.model.named_parameters(remove_duplicate=False))
        tp = self.layout.tp
        for name, p in self.module.named_parameters():
            full = _full(p)
            target = self._whole_name(name)
            if tp > 1 and ".qkv." in target:  # apply_tp regrouped its rows by rank: back to [Q; K; V]
                full = tensor.qkv_rows_by_rank(full, tp, inverse=True)
            whole[target].copy_(full)
        for name, p in self.model.named_parameters():
            dist.broadcast(p.data, src=dist.get_global_rank(self.group, self.owner[name]), group=self.group)

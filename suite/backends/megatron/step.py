"""Megatron-core's own step: the spec's micro-batches (and pipeline stages) through `get_forward_backward_func`.

The loss is Megatron's vocab-parallel cross-entropy on the last stage (each TP rank holds a vocabulary shard
of the logits; nothing is gathered), with the padding rows of a vocabulary padded to a multiple of TP masked
out, so it equals the workload's full-vocabulary cross-entropy. Megatron's schedules divide each micro-batch's
loss by the number of micro-batches: the accumulated gradient is the whole batch's mean, as in one process.
Under pipeline parallelism evaluation runs the same schedule forward-only (`PipelineEval`).

Labelled samples (`task: causal_lm_samples`, suite/workloads/sample_lm.py): a batch is (ids, labels), labels -100
on the prompt and padding. The target of position t is labels[t + 1] (the last position has none), the -100 targets
are the loss mask, and each micro-batch's loss is the mean over its labelled tokens, as the workload's own loss on
that micro-batch (the torch backend's accumulation: each micro-batch's mean, divided by their number; data-parallel
gradients averaged). The last pipeline stage computes it, the targets reaching it through the data iterator.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from suite.data.text.govreport import IGNORE


def positions_and_mask(idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    b, t = idx.shape
    pos = torch.arange(t, device=idx.device).unsqueeze(0).expand(b, t)
    # Megatron's default causal mask is built on "cuda"; an explicit one (True = masked) is the same mask
    mask = torch.ones(t, t, dtype=torch.bool, device=idx.device).triu(1).view(1, 1, t, t)
    return pos, mask


class MegatronSteps:
    """Forward and backward of one optimizer step's micro-batches on this rank's model chunk."""

    def __init__(self, model: nn.Module, vocab: int, seq_len: int, n_micro: int, micro: int, labelled: bool = False):
        from megatron.core import parallel_state
        from megatron.core.pipeline_parallel import get_forward_backward_func

        self.model, self.vocab, self.seq_len = model, vocab, seq_len
        self.n_micro, self.micro = n_micro, micro
        self.labelled = labelled  # batches are (ids, labels with IGNORE), not (input, next-token) windows
        self.forward_backward = get_forward_backward_func()
        self.pp = parallel_state.get_pipeline_model_parallel_world_size()
        self.pp_group = parallel_state.get_pipeline_model_parallel_group() if self.pp > 1 else None
        self.last = parallel_state.is_pipeline_last_stage()
        self.tp_rank = parallel_state.get_tensor_model_parallel_rank()

    def loss(self, target: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        from megatron.core import tensor_parallel

        logits = logits.float()
        v_local = logits.shape[-1]
        column = self.tp_rank * v_local + torch.arange(v_local, device=logits.device)
        if int(column[-1]) >= self.vocab:  # this shard holds padding rows: they are not in the vocabulary
            logits = logits.masked_fill(column >= self.vocab, -1e9)
        if not self.labelled:
            loss = tensor_parallel.vocab_parallel_cross_entropy(logits, target).mean()
        else:
            counted = target != IGNORE
            per_token = tensor_parallel.vocab_parallel_cross_entropy(logits, target.masked_fill(~counted, 0))
            loss = (per_token * counted).sum() / counted.sum().clamp(min=1)
        return loss, {"loss": loss.detach().clone()}  # the schedule divides `loss` in place

    def _forward_step(self, data: Any, model: nn.Module) -> tuple[torch.Tensor, Any]:
        x, y = next(data)
        pos, mask = positions_and_mask(x)
        return model(x, pos, mask, runtime_gather_output=False), partial(self.loss, y)

    def run(self, batch: Any) -> torch.Tensor:
        """Every micro-batch forward and backward; the mean loss, known to every stage."""
        x, y = batch
        if self.labelled:  # position t predicts labels[t + 1]; the last position predicts nothing
            y = torch.cat([y[:, 1:], torch.full_like(y[:, :1], IGNORE)], dim=1)
        micro = list(zip(x.chunk(self.n_micro), y.chunk(self.n_micro), strict=True))
        stored = self.forward_backward(
            forward_step_func=self._forward_step, data_iterator=iter(micro), model=[self.model],
            num_microbatches=self.n_micro, seq_length=self.seq_len, micro_batch_size=micro[0][0].shape[0],
            forward_only=False)
        if self.last:
            loss = torch.stack([s["loss"] for s in stored]).mean()
        else:
            loss = torch.zeros((), device=x.device)
        if self.pp_group is not None:
            dist.all_reduce(loss, group=self.pp_group)
        return loss

    @torch.no_grad()
    def tied_embedding_grads(self, gpt: nn.Module) -> None:
        """A tied embedding lives on the first and last stage: sum its two gradients (Megatron's embedding group)."""
        from megatron.core import parallel_state

        if self.pp == 1 or not getattr(gpt, "share_embeddings_and_output_weights", False):
            return
        if not parallel_state.is_rank_in_embedding_group():
            return
        weight = gpt.shared_embedding_or_output_weight()
        if weight.grad is None:
            weight.grad = torch.zeros_like(weight)
        dist.all_reduce(weight.grad, group=parallel_state.get_embedding_group())


class PipelineEval(nn.Module):
    """Token ids [b, t] -> full-vocabulary logits on every rank, through the pipeline forward-only."""

    def __init__(self, steps: MegatronSteps, model: nn.Module):
        super().__init__()
        self.steps = steps
        self.model = model  # a submodule: the workload's eval()/train() reach it

    def _forward_step(self, data: Any, model: nn.Module) -> tuple[torch.Tensor, None]:
        x = next(data)
        pos, mask = positions_and_mask(x)
        return model(x, pos, mask, runtime_gather_output=True), None

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        s = self.steps
        stored = s.forward_backward(
            forward_step_func=self._forward_step, data_iterator=iter([idx]), model=[self.model], num_microbatches=1,
            seq_length=idx.shape[1], micro_batch_size=idx.shape[0], forward_only=True)
        if s.last:
            logits = stored[0][..., : s.vocab].float().contiguous()
        else:
            logits = torch.empty(idx.shape[0], idx.shape[1], s.vocab, device=idx.device)
        if s.pp_group is not None:
            src = dist.get_global_rank(s.pp_group, s.pp - 1)
            dist.broadcast(logits, src=src, group=s.pp_group)
        return logits


@torch.no_grad()
def clip_grad_norm(params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """torch's clip_grad_norm_ over the whole model's gradients on the CPU path, as Megatron's optimizer counts them
    (clip_grads.get_grad_norm_fp32): a tensor-parallel shard counted on every tp rank, a replicated parameter once
    (tp rank 0), a tied embedding's second copy not at all, the squares summed over the tp x pp group. Each rank's
    own norm would clip tp and pp runs by another factor than one process."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate
    from megatron.core.transformer.module import param_is_not_shared

    grads = [p.grad for p in params if p.grad is not None]
    counted = [p.grad for p in params
               if p.grad is not None and param_is_not_shared(p) and param_is_not_tensor_parallel_duplicate(p)]
    device = grads[0].device if grads else torch.device("cpu")
    square = torch.zeros((), device=device)
    for g in counted:
        square += g.float().pow(2).sum()
    group = parallel_state.get_model_parallel_group()
    if dist.get_world_size(group) > 1:
        dist.all_reduce(square, group=group)
    total = square.sqrt()
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)  # torch's clip_grad_norm_: eps 1e-6, never scaled up
    for g in grads:
        g.mul_(scale.to(g.dtype))
    return total

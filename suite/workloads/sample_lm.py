"""Causal language modelling on fixed-length samples with per-token labels (`task: causal_lm_samples`): the MLPerf
llama2_70b_lora reference's fine-tune (Hugging Face Trainer on packed GovReport rows).

Loss: transformers' causal-LM loss, the logits at position t against labels[t + 1], tokens labelled -100 left
out, the mean over the counted tokens. Training visits the samples in a fresh seeded permutation each epoch (the
Trainer's RandomSampler); rank r takes the r-th slice of each global batch. `eval_loss`: the mean over validation
samples of each sample's mean loss, what the Trainer reports with per_device_eval_batch_size 1 (the reference's).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from suite.data.text.govreport import IGNORE, SampleSplits
from suite.workloads.base import WorkloadBase
from suite.workloads.checks import CausalLMSamplesChecks
from suite.workloads.contract import Batch, Context


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed loss, counted tokens) per sample: logits[:, t] predicts labels[:, t + 1]; IGNORE is skipped."""
    shifted = logits[:, :-1].float()
    target = labels[:, 1:]
    loss = F.cross_entropy(shifted.reshape(-1, shifted.shape[-1]), target.reshape(-1), ignore_index=IGNORE,
                           reduction="none").view(target.shape)
    return loss.sum(1), (target != IGNORE).sum(1)


class CausalLMSamples(CausalLMSamplesChecks, WorkloadBase):
    def __init__(self, spec, ctx: Context):
        super().__init__(spec, ctx)
        self.splits: SampleSplits = self.data_component.load(self.data_cfg)
        self.meta = self.splits.meta
        self.seq_len = int(self.splits.train_ids.shape[1])
        model_seq = getattr(self.model_cfg, "seq_len", None)
        if model_seq is not None and int(model_seq) != self.seq_len:
            raise ValueError(f"model.seq_len {model_seq} is not the data's sample length {self.seq_len}: set "
                             f"model.seq_len: {self.seq_len}")
        self.check_batch_fits(len(self.splits.train_ids))
        limit = spec.eval.subset
        self.val_ids = torch.from_numpy(self.splits.val_ids[:limit].astype(np.int64))
        self.val_labels = torch.from_numpy(self.splits.val_labels[:limit].astype(np.int64))

    def build_model(self) -> nn.Module:
        return self.model_component.build(self.model_cfg, self.meta)

    def train_batches(self, rank: int, world: int) -> Iterator[Batch]:
        local = self.local_batch_size(world)
        ids, labels = self.splits.train_ids, self.splits.train_labels
        global_bs, epoch = local * world, 0
        while True:
            order = np.random.default_rng([self.ctx.seed, epoch, 0x10A]).permutation(len(ids))
            for start in range(0, len(order) - global_bs + 1, global_bs):  # the Trainer drops no last batch; a
                mine = order[start + rank * local: start + (rank + 1) * local]  # short one would skew a step
                yield (torch.from_numpy(ids[mine].astype(np.int64)), torch.from_numpy(labels[mine].astype(np.int64)))
            epoch += 1

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        ids, labels = batch
        total, count = token_losses(model(ids), labels)
        return total.sum() / count.sum().clamp(min=1)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        bs = self.spec.data.eval_batch_size or self.spec.data.batch_size
        per_sample: list[torch.Tensor] = []
        for i in range(0, len(self.val_ids), bs):
            total, count = token_losses(model(self.val_ids[i: i + bs].to(device)), self.val_labels[i: i + bs].to(device))
            per_sample.append((total / count.clamp(min=1)).cpu())
        model.train(was_training)
        return {"eval_loss": float(torch.cat(per_sample).mean())}

    def tokens_per_sample(self) -> int:
        return self.seq_len

    def flops_per_sample(self) -> float:
        return float(self.model_component.flops_per_sample(self.model_cfg, self.meta))

    def mllog_hyperparameters(self) -> dict[str, object]:
        """The keys MLPerf's llama2_70b_lora rules require beside the common ones (closed_llama2_70b_lora.yaml)."""
        spec, lora = self.spec, getattr(self.model_cfg, "lora", None)
        out: dict[str, object] = {
            "opt_learning_rate_training_steps": spec.schedule.total_steps or spec.budget.max_steps,
            "opt_adamw_weight_decay": spec.optimizer.weight_decay,
            "opt_gradient_clip_norm": float(spec.backends.get("torch", {}).get("grad_clip") or 0.0),
            "opt_lr_warmup_factor": 0.0 if not spec.schedule.warmup_steps else
            spec.schedule.warmup_steps / float(spec.schedule.total_steps or spec.budget.max_steps or 1)}
        if lora is not None:
            out |= {"lora_rank": lora.rank, "lora_alpha": lora.alpha}
        return out

    def train_samples(self) -> int:
        return len(self.splits.train_ids)

    def eval_samples(self) -> int:
        return len(self.val_ids)

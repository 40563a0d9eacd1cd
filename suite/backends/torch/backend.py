"""Plain PyTorch: eager or torch.compile, the precision recipes of suite/algorithms/precision.py, compression hooks,
and the layouts of suite/backends/layout.py through PyTorch's own APIs: DDP, FSDP2, DTensor TP, pipelining,
activation checkpointing (suite/backends/parallel/, applied from outside to the single-device model).
Gradient accumulation: the spec's micro-batches, loss scaled 1/k, gradients synchronised on the last only."""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn

from suite import devices
from suite.algorithms import compression, float8, precision
from suite.algorithms.optimizers import build_optimizer
from suite.algorithms.schedules import build_scheduler
from suite.backends import layout as layouts
from suite.backends.availability import Availability
from suite.backends.base import Backend, RunOptions, StepOut, TrainState
from suite.backends.parallel import (
    checkpoint,
    expert,
    fsdp,
    mesh,
    pipeline,
    pipeline_llama,
    refusals,
    state_names,
    tables,
    tensor,
)
from suite.backends.parallel.allreduce_timer import AllreduceTimer
from suite.backends.parallel.fsdp_comm_timer import FsdpCommTimer
from suite.backends.torch.options import Options, supports
from suite.models.common import moe
from suite.workloads.contract import Batch, Workload


def to_device(batch: Batch, device: torch.device) -> Batch:
    if isinstance(batch, torch.Tensor):
        return batch if batch.device == device else batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


class TorchBackend(Backend):
    name: ClassVar[str] = "torch"
    checkpoint_format: ClassVar[str | None] = "torch.distributed.checkpoint"  # suite/backends/resume.py
    Options = Options
    supports = staticmethod(supports)

    def __init__(self, device: devices.Device):
        self.device = device
        self.world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        self._autocast: Any = nullcontext
        self.opts = Options()
        self.compression: Any = None
        self.precision = precision.Precision("fp32", device.type)
        self.layout = layouts.Layout(dp=self.world)
        self.micro: int | None = None
        self.n_micro = 1
        self.recompute = 0.0
        self.mesh: Any = None
        self.pipeline: pipeline.Pipeline | pipeline_llama.LlamaPipeline | None = None
        self.float8_layers: list[str] = []  # the Linear layers --precision float8 converted
        self.compiled: str | None = None  # what torch.compile wraps: "blocks" (each, torchtitan) or "model"
        self.has_moe = False  # Mixture-of-Experts layers: their load-balancing loss's gradient scale is set per step
        self.tables: dict[str, Any] | None = None  # parallel.tables: the embedding tables' plan, as recorded

    def available(self) -> Availability:
        return Availability(True, version=torch.__version__)

    def setup(self, workload: Workload, opts: RunOptions) -> TrainState:
        self.opts = Options.model_validate(opts.options)
        if opts.precision not in precision.RECIPES:
            raise ValueError(f"--precision {opts.precision!r}: expected one of {', '.join(precision.RECIPES)}")
        reason = precision.unsupported_reason(opts.precision, self.device.type)
        if reason:
            raise precision.PrecisionUnsupported(reason)
        spec = workload.spec
        self.layout = lay = layouts.resolve(spec.parallel, self.world)
        self.micro, self.n_micro = layouts.micro_batches(spec, lay)
        raw = tables.build_model(workload, self.world).to(self.device.torch)  # sharded tables: not allocated
        self.has_moe = any(isinstance(m, moe.MoE) for m in raw.modules())
        if spec.parallel is not None and spec.parallel.tables is not None and self.world > 1:  # before any wrapping
            self.tables = tables.apply(raw, spec, dist.get_rank(), self.world, compile=opts.compile)
        self.layout = lay = self._loss_parallel_fits(raw, lay, spec, workload)
        if hasattr(raw, "apply_tp_plan"):  # a model's own TP plan (the DiT) has no sp or loss parallel: recorded off
            self.layout = lay = dataclasses.replace(lay, sp=False, loss_parallel=False)
        self._check_layout(raw, lay, opts, spec)
        # compression and the precision recipe change the single-device model, before compile and DDP wrap it
        self.compression = compression.build(spec.compression, raw, spec.budget.max_steps)
        self.precision = precision.Precision(opts.precision, self.device.type)
        train_params = self.precision.prepare(raw)
        if self.precision.recipe.float8:  # before TP/FSDP wrap the layers, as torchtitan's converters
            self.float8_layers = float8.convert(raw)
        self._autocast = self.precision.autocast
        self.recompute = checkpoint.recompute_fraction(lay.ac, raw)
        model: nn.Module = raw
        allreduce = AllreduceTimer()  # each step's seconds in DDP's gradient all-reduce (suite/execution/ranks.py)
        if self._sharded(lay):
            model, train_params = self._parallelize(raw, lay, opts, workload)
        else:
            if lay.ac != "none":
                checkpoint.apply_ac(raw, lay.ac)
            if opts.compile:
                model = torch.compile(model)  # type: ignore[assignment]
                self.compiled = "model"
            if self.world > 1:
                ids = [self.device.index] if self.device.type in ("cuda", "npu") else None
                model = nn.parallel.DistributedDataParallel(
                    model, device_ids=ids, find_unused_parameters=self.opts.find_unused_parameters
                )
                allreduce.attach(model)
        optimizer = build_optimizer(spec.optimizer, train_params)
        scheduler = build_scheduler(spec.schedule, optimizer, spec.budget.max_steps)
        scaler = self.precision.scaler()
        fsdp_comm = FsdpCommTimer()  # each step's seconds in FSDP2's all-gathers / reduce-scatters (CPU)
        fsdp_comm.attach(model, optimizer, self.device.type)
        self.workload = workload
        self.steps_done = 0
        micro = spec.data.micro_batch_size
        if micro and workload.local_batch_size(self.world) % micro:
            raise ValueError(f"data.micro_batch_size {micro} does not divide the per-rank batch "
                             f"{workload.local_batch_size(self.world)} (data.batch_size over {self.world} ranks)")
        # looked up once: getattr on an nn.Module that lacks the name raises inside, ~1.5 us a step (issue 29)
        after_step = getattr(raw, "after_optimizer_step", None)  # a model's own per-step update (lookahead)
        return TrainState(model=model, raw_model=raw, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                          extra={"train_params": train_params, "after_step": after_step,
                                 "allreduce_s": allreduce.spans_s, "fsdp_comm_s": fsdp_comm.spans_s,
                                 "fsdp_reduce_scatter_s": fsdp_comm.reduce_scatter_s})

    @staticmethod
    def _sharded(lay: layouts.Layout) -> bool:
        """A layout beyond plain DDP: needs a DeviceMesh and the parallel/ functions."""
        return lay.fsdp > 1 or lay.tp > 1 or lay.pp > 1 or lay.ep > 1

    @staticmethod
    def _loss_parallel_fits(raw: nn.Module, lay: layouts.Layout, spec: Any, workload: Workload) -> layouts.Layout:
        """Loss parallel needs the workload's cross-entropy over every logit column. A vocabulary padded past the
        data's (gpt2_124m: 50304 for 50257) is cut back by the loss (`logits[..., :V]`), which replicates the
        sharded logits: the default then turns loss parallel off (recorded); asking for it is refused."""
        real = (getattr(workload, "meta", None) or {}).get("vocab_size")
        head = getattr(raw, "lm_head", None)
        if not (lay.loss_parallel and real and isinstance(head, nn.Linear) and head.out_features > int(real)):
            return lay
        if spec.parallel is not None and spec.parallel.loss_parallel:
            raise ValueError(f"parallel.loss_parallel: the model's vocabulary is padded ({head.out_features} > the "
                             f"data's {real}) and the workload's loss drops the padding columns, which a "
                             "vocabulary-sharded cross-entropy cannot; set parallel.loss_parallel=false")
        return dataclasses.replace(lay, loss_parallel=False)

    def _check_layout(self, raw: nn.Module, lay: layouts.Layout, opts: RunOptions, spec: Any) -> None:
        reasons = []
        if lay.ac != "none":
            reasons.append(checkpoint.ac_unsupported(raw))
        if lay.tp > 1:
            reasons.append(tensor.tp_unsupported(raw, lay.tp))
        if lay.pp > 1:
            llama = pipeline_llama.is_llama(raw)
            reasons.append((pipeline_llama if llama else pipeline).pp_unsupported(raw, lay))
        if lay.ep > 1:
            reasons.append(expert.ep_unsupported(raw, lay.ep))
            if opts.compile:
                reasons.append("--compile with ep is not implemented (the expert exchange's splits are data-dependent)")
        reasons.append(refusals.checkpoint_refusal(lay, spec.checkpoint is not None))
        if self._sharded(lay):
            if opts.precision not in ("fp32", "bf16", "float8"):
                reasons.append(f"--precision {opts.precision}: layouts with fsdp/tp/pp run fp32 or bf16")
            if opts.precision == "float8" and (lay.tp > 1 or lay.pp > 1):
                reasons.append("--precision float8 with tp/pp is not implemented (torchao's float8 TP plans are "
                               "not wired); it runs with dp and fsdp")
            if spec.compression is not None:
                reasons.append("compression with fsdp/tp/pp layouts is not implemented (use a dp layout)")
        problems = [r for r in reasons if r]
        if problems:
            raise ValueError(f"parallel {lay.describe()}: " + "; ".join(problems))

    def _parallelize(self, raw: nn.Module, lay: layouts.Layout, opts: RunOptions,
                     workload: Workload) -> tuple[nn.Module, list[nn.Parameter]]:
        """torchtitan's order: the pipeline split, then per stage (or on the whole model) TP, activation
        checkpointing, per-block compile, FSDP. Under pp `raw` stays a plain whole model, for evaluation."""
        self.mesh = m = mesh.build(lay, self.device.type)
        if lay.pp > 1 and pipeline_llama.is_llama(raw):  # its own stages; dp and ep reduced by the pipeline
            self.pipeline = pipeline_llama.LlamaPipeline(raw, m, lay, self.n_micro, self.device.torch,
                                                         self._stage_loss, compile=opts.compile)
            self.compiled = "blocks" if opts.compile else None
            return raw, self.pipeline.parameters()
        if lay.pp > 1:
            self.pipeline = pipeline.Pipeline(raw, m, lay, self.n_micro, self.device.torch, self._stage_loss,
                                              parallelize=lambda stage: self._apply(stage, lay, opts, pipelined=True))
            return raw, self.pipeline.parameters()
        self._apply(raw, lay, opts, pipelined=False)
        return raw, [p for p in raw.parameters() if p.requires_grad]

    def _apply(self, module: nn.Module, lay: layouts.Layout, opts: RunOptions, pipelined: bool) -> bool:
        """TP, AC, compile and FSDP on `module` (the GPT, or one pipeline stage); True when FSDP was applied.

        Without pp, dp replicas are HSDP with a shard size of 1 (FSDP reduces over dp); under pp with fsdp=1
        the pipeline averages gradients over dp itself."""
        m = self.mesh
        if lay.tp > 1:
            tensor.apply_tp(module, m["tp"], sequence_parallel=lay.sp, loss_parallel=lay.loss_parallel)
        checkpoint.apply_ac(module, lay.ac)
        if opts.compile:
            for block in getattr(module, "blocks", None) or module.layers:  # the GPT's blocks, the Llama's layers
                block.compile()  # per block, in place: composes with fully_shard's per-block hooks
            self.compiled = "blocks"
        if lay.ep > 1:  # experts split over ep and FSDP-sharded over (dp, fsdp); the rest HSDP over (dp x ep, fsdp)
            dense_mesh, expert_mesh = expert.meshes(m)
            shards = expert.apply_ep(module, m["ep"])
            expert.shard_experts(shards, expert_mesh, fsdp.mp_policy(opts.precision), lay.data_parallel)
            fsdp.apply_fsdp(module, dense_mesh, opts.precision)
        elif not (lay.fsdp > 1 or (lay.dp > 1 and not pipelined)):
            return False
        else:  # HSDP (dp replicas of fsdp shards); with fsdp=1 plain replication
            fsdp.apply_fsdp(module, m["dp", "fsdp"] if lay.dp > 1 else m["fsdp"], opts.precision,
                            reshard_after_forward=not pipelined)
        if opts.precision in ("bf16", "float8"):
            self._autocast = nullcontext  # bf16 is the MixedPrecisionPolicy's (fsdp.py)
        return True

    def _stage_loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The workload's own loss on the last stage's output (its `loss(model, (x, y))` with the output as model)."""
        return self.workload.loss(lambda _x: output, (None, target))  # type: ignore[arg-type]

    def data_shard(self) -> tuple[int, int]:
        """(rank, world) for the data loader: TP and PP peers read the same batch."""
        if self.mesh is None:
            return (dist.get_rank() if self.world > 1 else 0), self.world
        return mesh.data_shard(self.mesh, self.layout)

    def _no_sync(self, model: nn.Module, last: bool) -> AbstractContextManager[Any]:
        if last:
            return nullcontext()
        if isinstance(model, nn.parallel.DistributedDataParallel):
            return model.no_sync()
        return nullcontext()

    def train_step(self, state: TrainState, batch: Batch) -> StepOut:
        batch = to_device(batch, self.device.torch)
        opt = state.optimizer
        opt.zero_grad(set_to_none=True)
        if self.pipeline is not None:
            with self._autocast(), self._loss_context():  # the schedule runs forward, loss and backward
                loss = self.pipeline.step(batch)
        else:
            loss = self._accumulate(state, batch)
        params = state.extra["train_params"]
        if state.scaler is not None:
            if self.opts.grad_clip:
                state.scaler.unscale_(opt)
                nn.utils.clip_grad_norm_(params, self.opts.grad_clip)
            state.scaler.step(opt)
            state.scaler.update()
        else:
            if self.precision.pairs:
                self.precision.grads_to_master()
            if self.opts.grad_clip:
                self._clip(params)
            opt.step()
        if self.precision.pairs:
            self.precision.master_to_model()
        after = state.extra["after_step"]
        if after is not None:
            after()
        self.steps_done += 1
        if self.compression is not None:
            self.compression.after_step(self.steps_done, self.precision.aliases)
        state.scheduler.step()
        return StepOut(loss)

    def _clip(self, params: list[nn.Parameter]) -> None:
        if self.pipeline is not None:  # the norm over every stage, DTensor parameters included
            self.pipeline.clip_grad_norm(self.opts.grad_clip)  # type: ignore[arg-type]
        elif self.tables is not None:  # each rank's table shards, the replicated dense gradients once
            tables.clip_grad_norm(params, self.opts.grad_clip)  # type: ignore[arg-type]
        elif self.layout.ep > 1:  # expert and dense gradients live on different meshes
            expert.clip_grad_norm(params, self.opts.grad_clip, self.mesh["ep"].get_group())  # type: ignore[arg-type]
        else:
            nn.utils.clip_grad_norm_(params, self.opts.grad_clip)  # type: ignore[arg-type]

    def _accumulate(self, state: TrainState, batch: Batch) -> torch.Tensor:
        """Forward and backward of each micro-batch, loss scaled 1/k; gradients synchronised on the last only."""
        if self.n_micro == 1:  # one micro-batch: no split, no running sum (its tensor ops cost ~15 us a step)
            loss = self._forward_backward(state, batch, 1)
            return (loss if type(loss) is torch.Tensor else tensor.gathered(loss)).float()  # a DTensor: gather
        chunks = split_batch(batch, self.n_micro, self.workload.batch_samples(batch))
        total = torch.zeros((), device=self.device.torch)
        for i, micro in enumerate(chunks):
            last = i == len(chunks) - 1
            fsdp.set_gradient_sync(state.model, last)
            with self._no_sync(state.model, last):
                loss = self._forward_backward(state, micro, len(chunks))
            total += tensor.gathered(loss).float()
        return total / len(chunks)

    def _forward_backward(self, state: TrainState, batch: Batch, parts: int) -> torch.Tensor:
        """One batch's (or micro-batch's) forward and backward, its loss scaled by 1/parts for the gradients; the
        loss unscaled and detached. A Mixture-of-Experts model's load-balancing loss joins the gradient inside the
        model (moe._AttachAuxLoss), so it gets the same factor here: 1/parts, times fp16's loss scale."""
        if self.has_moe:  # the scaler's factor as a tensor: no device sync
            one = torch.ones((), device=self.device.torch)
            moe.set_aux_loss_grad_scale((state.scaler.scale(one) if state.scaler is not None else one) / parts)
        with self._loss_context():
            with self._autocast():
                loss = self.workload.loss(state.model, batch)
            scaled = loss / parts if parts > 1 else loss
            if state.scaler is not None:
                state.scaler.scale(scaled).backward()
            else:
                scaled.backward()
        return loss.detach()

    def _loss_context(self) -> AbstractContextManager[Any]:
        """Loss parallel: the workload's cross-entropy (and its backward) on vocabulary-sharded logits."""
        if not self.layout.loss_parallel:
            return nullcontext()
        from torch.distributed.tensor.parallel import loss_parallel

        return loss_parallel()

    def target_may_count(self) -> bool:
        """False while a compression method is still converging (e.g. pruning before its final sparsity)."""
        return self.compression is None or bool(self.compression.target_may_count())

    def algorithm_report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"compression": self.compression.report()} if self.compression is not None else {}
        if self.float8_layers:
            out["float8"] = {"converted_linear_layers": self.float8_layers}
        return out

    def eval_model(self, state: TrainState) -> nn.Module:
        # evaluate the compiled module where there is one (same weights); never the DDP wrapper
        if self.pipeline is not None:  # called before each evaluation: every rank's plain copy up to date
            self.pipeline.sync_for_eval()
            return state.raw_model
        model = state.model.module if isinstance(state.model, nn.parallel.DistributedDataParallel) else state.model
        if self.layout.loss_parallel:  # the workload's evaluation reads whole logits
            return tensor.GatherLogits(model)
        return model

    def synchronize(self) -> None:
        self.device.synchronize()

    def checkpoint_state(self, state: TrainState) -> dict[str, Any]:  # the whole model's names, any layout
        return state_names.state(self._named_model(state), state.optimizer)

    def load_checkpoint_state(self, state: TrainState, app_state: dict[str, Any]) -> None:
        state_names.load(self._named_model(state), state.optimizer, app_state)

    def _named_model(self, state: TrainState) -> nn.Module:
        return state.model if self.pipeline is None else state_names.whole_view(self.pipeline)

    def parallel_layout(self) -> dict[str, Any]:
        return {**self.layout.record(), "micro_batch_size": self.micro, "micro_batches": self.n_micro,
                "activation_checkpointing": self.layout.ac, "recompute_fraction": self.recompute,
                "compile": self.compiled, **({"tables": self.tables} if self.tables is not None else {})}

    def recompute_fraction(self) -> float | None:
        return self.recompute

    def close(self) -> None:
        pass


def split_batch(batch: Batch, n: int, samples: int | None = None) -> list[Batch]:
    """A batch (tensor, tuple/list/dict of tensors) cut into n micro-batches along the first dimension.

    With `samples` (the workload's count), every tensor must have exactly that many rows: anything else (a
    packed graph batch, whose rows are nodes and edges) is refused, never cut wrong."""
    if n == 1:
        return [batch]
    if isinstance(batch, torch.Tensor):
        rows = batch.shape[0] if batch.dim() else 0
        if (samples is not None and rows != samples) or not rows or rows % n:
            raise ValueError(f"cannot split a batch tensor of shape {tuple(batch.shape)} into {n} micro-batches"
                             + (f" of {samples} samples" if samples is not None else "")
                             + "; this workload's batches do not support data.micro_batch_size")
        return list(batch.chunk(n))
    if isinstance(batch, (list, tuple)):
        parts = [split_batch(b, n, samples) for b in batch]
        return [type(batch)(p[i] for p in parts) for i in range(n)]
    if isinstance(batch, dict):
        parts_d = {k: split_batch(v, n, samples) for k, v in batch.items()}
        return [{k: v[i] for k, v in parts_d.items()} for i in range(n)]
    raise ValueError(f"cannot split a {type(batch).__name__} in a batch into micro-batches; this workload's "
                     "batches do not support data.micro_batch_size")

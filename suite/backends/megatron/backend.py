"""Megatron-core: a Megatron `GPTModel` built from the spec's gpt Config, TP x PP x DP, Megatron's own step.

The model is the same declarative GPT the torch backend trains (suite/models/gpt/model.py): the reference model
is built first, with the run's seed, and its weights are copied (sharded across tensor-parallel ranks, split
across pipeline stages; suite/backends/megatron/model.py) into the Megatron model, so both backends start
from identical weights in any layout. Each step runs the spec's micro-batches through Megatron's
`get_forward_backward_func` (pipeline schedule when pp > 1) with vocab-parallel cross-entropy
(suite/backends/megatron/step.py); `task: causal_lm_samples` (MLPerf's llama2_70b_lora) with its -100 labels as
the loss mask.

On CUDA: Megatron's DDP (gradient reduction overlapped with backward under the distributed optimizer),
its (distributed) optimizer (fp32 main params, bf16 through Float16Module), sequence parallelism with TP,
and Transformer Engine's layer spec when `transformer_engine` imports (the local spec otherwise; recorded).
On CPU: Megatron hard-codes CUDA for its RNG tracker, `torch.cuda.current_device()`, a few schedule tensors
and its optimizers (FACTS.md). `CpuShim` maps those onto the CPU for the lifetime of one run only, a torch optimizer
from the spec trains the model (clipped by the gradient norm over the tp x pp shards, as Megatron counts it), and
data-parallel gradients are averaged by torch DDP over Megatron's data-parallel group. Sequence parallelism needs
Transformer Engine's layer spec (the local spec's torch LayerNorm refuses it), so on CPU `parallel.sp` is refused
with that reason.

LoRA (`arch: hf_llama` with `lora:`): the base is built without peft's adapters and its weights copied as for the
Llama; then Megatron's own adapters (suite/backends/megatron/lora_layers.py: one over the fused linear_qkv, as the
MLPerf reference's) are attached and are the only parameters the optimizer holds.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import socket
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn

from suite import devices
from suite.algorithms.optimizers import build_optimizer
from suite.algorithms.schedules import build_scheduler, lr_multiplier
from suite.backends import layout as layouts
from suite.backends import translate
from suite.backends.availability import Availability
from suite.backends.base import Backend, RunOptions, StepOut, TrainState
from suite.backends.layout import is_pretrained_llama
from suite.backends.megatron import llama as megatron_llama
from suite.backends.megatron import llama_refusals as llama_refusals
from suite.backends.megatron import lora as megatron_lora
from suite.backends.megatron.cpu import CpuShim
from suite.backends.megatron.model import MegatronGPT, layer_spec, megatron_state, te_names
from suite.backends.megatron.options import (
    Options,
    available_installed,
    degrees,
    sequence_parallel_wanted,
    supports,
)
from suite.backends.megatron.recompute import recompute_config, recompute_fraction
from suite.backends.megatron.step import MegatronSteps, PipelineEval, clip_grad_norm
from suite.backends.torch.backend import to_device
from suite.measure.fingerprint import package_version
from suite.workloads.contract import Batch, Workload


def version() -> str | None:
    return package_version("megatron-core")


class MegatronBackend(Backend):
    name: ClassVar[str] = "megatron"
    Options = Options
    supports = staticmethod(supports)

    def __init__(self, device: devices.Device):
        self.device = device
        self.opts = Options()
        self.shim: CpuShim | None = None
        self._own_group = False
        self._parallel_ready = False
        self._autocast: Any = nullcontext
        self.world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        self.dp = self.world
        self.dp_rank = 0
        self.experts: list[str] = []  # MoE expert parameters (CPU path: reduced over the expert group by hand)

    def available(self) -> Availability:
        return available_installed(self.device.type)

    def data_shard(self) -> tuple[int, int]:
        """(rank, world) for the data loader: tensor-parallel peers must read the same batch."""
        return self.dp_rank, self.dp

    def _init_parallel(self, tp: int, pp: int, ep: int = 1) -> None:
        from megatron.core import parallel_state

        if not dist.is_initialized():  # one process: Megatron still wants a process group
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                                    timeout=timedelta(seconds=120))
            self._own_group = True
        self.world = dist.get_world_size()
        if self.world % (tp * pp):
            raise ValueError(f"backends.megatron: tp={tp} x pp={pp} does not divide the world size {self.world}")
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                                 expert_model_parallel_size=ep)
        self._parallel_ready = True
        self.dp = parallel_state.get_data_parallel_world_size()
        self.dp_rank = parallel_state.get_data_parallel_rank()

    def setup(self, workload: Workload, opts: RunOptions) -> TrainState:
        reason = supports(workload.spec)
        if reason:
            raise ValueError(reason)
        self.opts = o = Options.model_validate(opts.options)
        if opts.compile:
            raise ValueError("--compile is not supported by the megatron backend")
        on_cuda = self.device.type == "cuda"
        want_sp = sequence_parallel_wanted(workload.spec, o)
        te = on_cuda and importlib.util.find_spec("transformer_engine") is not None
        if want_sp and degrees(workload.spec, o)[0] > 1 and not te:
            raise ValueError("parallel.sp: Megatron's sequence parallelism needs Transformer Engine's layer spec "
                             "(CUDA with transformer-engine installed); the local spec's torch LayerNorm refuses it. "
                             "Set parallel.sp=false (or run the torch backend, whose TP has sequence parallelism)")
        if not on_cuda:
            self.shim = CpuShim()
            self.shim.install()
        from megatron.core import parallel_state, tensor_parallel
        from megatron.core.models.gpt import GPTModel
        from megatron.core.transformer.transformer_config import TransformerConfig

        spec = workload.spec
        tp, pp = degrees(spec, o)
        ep = spec.parallel.ep if spec.parallel is not None else 1
        self._init_parallel(tp, pp, ep)
        # Megatron's data-parallel group holds the ep ranks too (they read different data): dp here is the rest
        fsdp = spec.parallel.fsdp if spec.parallel is not None else 1
        self.fsdp_mapping = translate.megatron_mapping(fsdp, ep, self.device.type, pp)
        self.layout = layouts.Layout(dp=self.dp // (ep * fsdp), fsdp=fsdp, ep=ep, tp=tp, pp=pp, schedule="1f1b",
                                     ac=spec.parallel.ac if spec.parallel is not None else "none")
        self.micro, self.n_micro = layouts.micro_batches(spec, self.layout)
        seed = int(getattr(getattr(workload, "ctx", None), "seed", 0))
        tensor_parallel.model_parallel_cuda_manual_seed(seed + 1)

        pretrained = is_pretrained_llama(spec.model.arch)
        lora = getattr(getattr(workload, "model_cfg", None), "lora", None) if pretrained else None
        # the suite GPT, built under the run's seed: the weights both backends share (LoRA: the base, without peft's)
        ref: Any = megatron_lora.base_model(workload) if lora is not None else workload.build_model()
        cfg: Any = ref.cfg
        llama = llama_refusals.is_llama_family(spec.model.arch)
        vocab = int((ref.tok_embeddings if llama else ref.wte).weight.shape[0])
        padded_vocab = -(-vocab // tp) * tp
        bf16 = opts.precision == "bf16"
        if opts.precision not in ("fp32", "bf16"):
            raise ValueError(f"--precision {opts.precision}: the megatron backend supports fp32 and bf16")
        if llama and want_sp and tp > 1:
            raise ValueError("parallel.sp: the Llama path builds Megatron's local layer spec, whose torch norms refuse "
                             "sequence parallelism; set parallel.sp=false")
        self.sequence_parallel = bool(tp > 1 and not llama and (want_sp if want_sp is not None else te))
        # the loss is always vocab_parallel_cross_entropy: loss parallel whenever there is a tp group
        self.layout = dataclasses.replace(self.layout, sp=self.sequence_parallel, loss_parallel=tp > 1)
        dispatch = megatron_llama.dispatcher(on_cuda)
        model_fields = megatron_llama.transformer_config(cfg, ep, dispatch, pp) if llama else dict(
            num_layers=cfg.n_layer, hidden_size=cfg.d_model, num_attention_heads=cfg.n_head,
            ffn_hidden_size=cfg.mlp_ratio * cfg.d_model, add_bias_linear=cfg.bias,
            hidden_dropout=cfg.dropout, attention_dropout=cfg.dropout, layernorm_epsilon=1e-5,
            activation_func=torch.nn.functional.gelu, init_method_std=0.02)
        tcfg = TransformerConfig(
            **model_fields, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
            sequence_parallel=self.sequence_parallel, pipeline_dtype=torch.bfloat16 if bf16 else torch.float32,
            use_cpu_initialization=True, perform_initialization=False,  # weights come from the reference
            bf16=bf16, params_dtype=torch.bfloat16 if bf16 else torch.float32,
            bias_dropout_fusion=False, masked_softmax_fusion=False, gradient_accumulation_fusion=False,
            apply_rope_fusion=False, persist_layer_norm=False, batch_p2p_sync=on_cuda,
            **recompute_config(spec.parallel.ac if spec.parallel is not None else "none"),
        )
        self.recompute = 0.0 if llama else recompute_fraction(self.layout.ac, cfg, vocab)
        self.layer_spec = "transformer_engine" if te and not llama else "local"
        first, last = parallel_state.is_pipeline_first_stage(), parallel_state.is_pipeline_last_stage()
        gpt = GPTModel(
            config=tcfg, transformer_layer_spec=layer_spec(on_cuda, tcfg if llama else None),
            vocab_size=padded_vocab, max_sequence_length=cfg.seq_len, parallel_output=True, pre_process=first,
            post_process=last, **(megatron_llama.gpt_kwargs(cfg) if llama else dict(
                share_embeddings_and_output_weights=cfg.tie_embeddings, position_embedding_type="learned_absolute")),
        )
        per_stage = cfg.n_layer // pp
        stage = parallel_state.get_pipeline_model_parallel_rank()
        layers = range(stage * per_stage, (stage + 1) * per_stage)
        if llama:  # uneven where pp does not divide the layers (Megatron's first/last stage sizes)
            layers = megatron_llama.stage_layers(cfg.n_layer, pp, stage)
        tp_rank = parallel_state.get_tensor_model_parallel_rank()
        if llama:
            megatron_llama.set_rope(gpt, cfg)
            state = megatron_llama.llama_state(ref, ep, parallel_state.get_expert_model_parallel_rank(), tp, tp_rank,
                                               padded_vocab, layers, first, last)
        else:
            state = megatron_state(ref, cfg.n_head, tp, tp_rank, padded_vocab, layers, first, last)
        if self.layer_spec == "transformer_engine":
            state = te_names(state)
        missing, unexpected = gpt.load_state_dict(state, strict=False)
        bias = getattr(cfg, "bias", True)
        missing = [k for k in missing if not k.endswith("_extra_state") and not (not bias and k.endswith("bias"))
                   and not (llama and megatron_llama.unmapped_bias(k, cfg))]
        if missing or unexpected:
            raise RuntimeError(f"megatron weight mapping is incomplete: missing {missing}, unexpected {unexpected}")
        if not bias:
            # Megatron's LayerNorms always carry a bias; the declarative model has none, so pin it at zero
            for name, p in gpt.named_parameters():
                if "layernorm" in name and name.endswith("bias"):
                    nn.init.zeros_(p)
                    p.requires_grad_(False)
        del ref
        if llama:  # Megatron's MLP biases that the suite's decoder lacks (with attention_bias): removed
            megatron_llama.drop_biases(gpt, cfg)
        if lora is not None:  # the base frozen, Megatron's own adapters on the targets: the only trained parameters
            if self.sequence_parallel:
                raise ValueError("parallel.sp with model.lora: the Megatron LoRA adapters take the full sequence; "
                                 "set parallel.sp=false")
            from suite.backends.megatron import lora_layers as megatron_lora_layers

            self.lora_modules = megatron_lora_layers.inject(gpt, lora, seed)
        gpt = gpt.to(self.device.torch)
        self.gpt = gpt
        params = [p for p in gpt.parameters() if p.requires_grad]
        if on_cuda:
            train_model, optimizer = self._cuda_wrap(gpt, tcfg, bf16, spec)
        else:
            train_model = gpt
            if bf16:
                # Megatron's linear layers are custom autograd functions that autocast does not reach, so
                # bf16 means bf16 weights (Float16Module). With a torch optimizer there are no fp32 master
                # weights on CPU: a correctness check of the bf16 path, not a training recipe.
                from megatron.core.transformer.module import Float16Module

                train_model = Float16Module(tcfg, gpt)
            if self.dp > 1:  # average gradients over the data-parallel group only (TP and PP peers hold other parts)
                self.experts = megatron_llama.expert_param_names(train_model)  # reduced by hand (train_step)
            # under pp, 1F1B runs a micro-batch's forward inside no_sync and its backward after it, and torch DDP
            # decides at forward time: it would never reduce. The dense gradients are averaged by hand instead
            self._dense_by_hand = self.dp > 1 and pp > 1
            if self.dp > 1 and not self._dense_by_hand:
                nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
                    train_model, self.experts)
                train_model = nn.parallel.DistributedDataParallel(
                    train_model, process_group=parallel_state.get_data_parallel_group())
                tcfg.no_sync_func = train_model.no_sync  # Megatron's schedules sync on the last micro-batch only
            optimizer = build_optimizer(spec.optimizer, params)
            if self.fsdp_mapping is not None:  # fsdp on CPU: the optimizer state sharded over the data-parallel group
                optimizer = translate.zero_redundancy(optimizer, parallel_state.get_data_parallel_group())
        self.steps = MegatronSteps(train_model, vocab, cfg.seq_len, self.n_micro, self.micro,
                                   labelled=spec.task == "causal_lm_samples")
        unwrapped = train_model.module if isinstance(train_model, nn.parallel.DistributedDataParallel) else train_model
        eval_model: nn.Module = PipelineEval(self.steps, unwrapped) if pp > 1 else MegatronGPT(unwrapped, vocab)
        # Megatron's optimizer is no torch Optimizer: on CUDA the same schedule is applied by hand in train_step
        self._lr_mult = lr_multiplier(spec.schedule, spec.budget.max_steps)
        self._base_lr = spec.optimizer.lr
        self._step = 0
        scheduler = None if on_cuda else build_scheduler(spec.schedule, optimizer, spec.budget.max_steps)
        self.workload = workload
        return TrainState(model=train_model, raw_model=gpt, optimizer=optimizer, scheduler=scheduler,
                          extra={"eval": eval_model})

    def _cuda_wrap(self, gpt: nn.Module, tcfg: Any, bf16: bool, spec: Any) -> tuple[nn.Module, Any]:
        """Megatron DDP (+ Float16Module for bf16) and Megatron's (distributed) optimizer, on CUDA."""
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.distributed.finalize_model_grads import finalize_model_grads
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.transformer.module import Float16Module

        module: nn.Module = Float16Module(tcfg, gpt) if bf16 else gpt
        dist_opt = self.opts.use_distributed_optimizer
        if self.fsdp_mapping is not None and not dist_opt:
            raise ValueError(f"parallel.fsdp={self.fsdp_mapping.fsdp} is Megatron's distributed optimizer; "
                             "backends.megatron.use_distributed_optimizer=false contradicts it")
        ddp_cfg = DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, overlap_grad_reduce=dist_opt, use_distributed_optimizer=dist_opt)
        ddp: Any = DistributedDataParallel(config=tcfg, ddp_config=ddp_cfg, module=module)
        o = spec.optimizer
        name = {"adamw": "adam", "adam": "adam", "sgd": "sgd"}.get(o.name)
        if name is None:
            raise ValueError(f"optimizer.name {o.name!r}: Megatron's optimizer offers adam(w) and sgd on CUDA")
        extra = o.params()
        betas = extra.get("betas", (0.9, 0.999))
        ocfg = OptimizerConfig(
            optimizer=name, lr=o.lr, weight_decay=o.weight_decay, bf16=bf16,
            adam_beta1=float(betas[0]), adam_beta2=float(betas[1]), adam_eps=float(extra.get("eps", 1e-8)),
            sgd_momentum=float(extra.get("momentum", 0.0)), use_distributed_optimizer=dist_opt,
            clip_grad=self.opts.grad_clip or 0.0,
        )
        # optimizer.decay: Megatron's default groups skip 1-D and bias parameters (= "matrices"); {} decays all
        optimizer = get_megatron_optimizer(ocfg, [ddp], config_overrides=None if o.decay == "matrices" else {})
        tcfg.no_sync_func = ddp.no_sync
        tcfg.finalize_model_grads_func = finalize_model_grads  # DP reduction + tied embedding grads
        if dist_opt:
            tcfg.grad_sync_func = ddp.start_grad_sync  # overlap the reduction with the last backward
        tcfg.grad_scale_func = optimizer.scale_loss
        self._megatron_optimizer = True
        return ddp, optimizer

    def train_step(self, state: TrainState, batch: Batch) -> StepOut:
        batch = to_device(batch, self.device.torch)
        opt = state.optimizer
        if getattr(self, "_megatron_optimizer", False):
            for group in opt.param_groups:
                group["lr"] = self._base_lr * self._lr_mult(self._step)
            state.model.zero_grad_buffer()
            opt.zero_grad()
            loss = self.steps.run(batch)
            opt.step()
            self._step += 1
            return StepOut(loss.detach())
        opt.zero_grad(set_to_none=True)
        loss = self.steps.run(batch)
        if self.experts:
            megatron_llama.reduce_expert_grads(self.gpt, self.dp)
        if getattr(self, "_dense_by_hand", False):
            megatron_llama.reduce_dense_grads(self.gpt, self.dp)
        self.steps.tied_embedding_grads(self.gpt)
        if self.opts.grad_clip:
            grads = [p for p in state.raw_model.parameters() if p.grad is not None]
            if self.layout.ep > 1:  # experts' shards: each rank's own norm (as before)
                nn.utils.clip_grad_norm_(grads, self.opts.grad_clip)
            else:  # the norm over the tp x pp shards, as one process computes it
                clip_grad_norm(grads, self.opts.grad_clip)
        opt.step()
        state.scheduler.step()
        return StepOut(loss.detach())

    def eval_model(self, state: TrainState) -> nn.Module:
        return state.extra["eval"]

    def synchronize(self) -> None:
        self.device.synchronize()

    def parallel_layout(self) -> dict[str, Any]:
        lay = getattr(self, "layout", None) or layouts.Layout(dp=self.dp, tp=self.opts.tp, pp=self.opts.pp)
        return {**lay.record(), "micro_batch_size": getattr(self, "micro", None),
                "micro_batches": getattr(self, "n_micro", 1), "zero_stage": None, "offload": None,
                "distributed_optimizer": bool(getattr(self, "_megatron_optimizer", False)
                                              and self.opts.use_distributed_optimizer),
                **(translate.layout_record(m) if (m := getattr(self, "fsdp_mapping", None)) else {}),
                "sequence_parallel": getattr(self, "sequence_parallel", False),
                "layer_spec": getattr(self, "layer_spec", None), "loss": "vocab_parallel_cross_entropy",
                "activation_checkpointing": lay.ac, "recompute_fraction": getattr(self, "recompute", 0.0)}

    def recompute_fraction(self) -> float | None:
        return getattr(self, "recompute", 0.0)

    # --checkpoint-every: Megatron's own dist_checkpointing (suite/backends/megatron/checkpoint.py)
    checkpoint_format: ClassVar[str | None] = "megatron.dist_checkpointing"

    def save_checkpoint(self, state: TrainState, folder: Path) -> None:
        from suite.backends.megatron import checkpoint as megatron_checkpoint

        megatron_checkpoint.save(folder, dist.get_rank() if dist.is_initialized() else 0, self.gpt, state.optimizer)

    def load_checkpoint(self, state: TrainState, folder: Path) -> None:
        from suite.backends.megatron import checkpoint as megatron_checkpoint

        megatron_checkpoint.load(folder, dist.get_rank() if dist.is_initialized() else 0, self.gpt, state.optimizer)

    def close(self) -> None:
        if self._parallel_ready:
            from megatron.core import parallel_state

            parallel_state.destroy_model_parallel()
            self._parallel_ready = False
        if self._own_group and dist.is_initialized():
            dist.destroy_process_group()
            self._own_group = False
        if self.shim is not None:
            self.shim.remove()
            self.shim = None


"""Megatron-core: a Megatron `GPTModel` (local layer spec) built from the spec's gpt Config, TP x DP (x PP on CUDA).

The model is the same declarative GPT the torch backend trains (suite/models/gpt.py): the reference model
is built first, with the run's seed, and its weights are copied (and sharded across tensor-parallel ranks)
into the Megatron model, so both backends start from identical weights at any TP degree.

On CUDA: Megatron's DDP and its distributed optimizer (fp32 main params, bf16 through Float16Module).
On CPU: Megatron hard-codes CUDA for its RNG tracker, `torch.cuda.current_device()` and its optimizers
(FACTS.md). `cpu_shim()` maps those onto the CPU for the lifetime of one run only (installed in setup,
removed in close), and a torch optimizer from the spec trains the model, with data-parallel gradients
averaged by torch DDP over Megatron's data-parallel group.
"""

from __future__ import annotations

import importlib.util
import socket
from contextlib import nullcontext
from datetime import timedelta
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from suite import devices
from suite.algorithms.optimizers import build_optimizer
from suite.algorithms.schedules import build_scheduler, lr_multiplier
from suite.backends.base import Availability, Backend, RunOptions, StepOut, TrainState
from suite.backends.torch import to_device
from suite.environment import package_version
from suite.workloads.base import Batch, Workload

SUPPORTED_ARCHS = ("gpt",)


class Options(BaseModel):
    """The spec's `backends.megatron` block."""

    model_config = ConfigDict(extra="forbid")
    tp: int = Field(default=1, ge=1, description="tensor-parallel degree (divides n_head and the world size)")
    pp: int = Field(default=1, ge=1, description="pipeline-parallel degree (> 1 is not implemented yet)")
    use_distributed_optimizer: bool = Field(default=True, description="CUDA only: Megatron's ZeRO-1 optimizer")
    grad_clip: float | None = Field(default=None, gt=0)


def is_gpt(arch: str) -> bool:
    """The spec's model is the suite GPT (by name or by import path), whose weights this backend can map."""
    if arch in SUPPORTED_ARCHS:
        return True
    from suite import registry
    from suite.models import gpt

    try:
        return registry.model_component(arch) is gpt.COMPONENT
    except registry.RegistryError:
        return False


def supports(spec: Any) -> str | None:
    """None if this backend can run the spec, else the reason it cannot."""
    if not is_gpt(spec.model.arch):
        return (f"megatron builds a Megatron GPTModel and runs transformer LM workloads only (model.arch gpt); "
                f"this spec's model.arch is {spec.model.arch!r}")
    try:
        opts = Options.model_validate(spec.backends.get("megatron", {}))
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return f"backends.megatron: {e}"
    n_head = int(spec.model.params().get("n_head", 1))
    if n_head % opts.tp:
        return f"backends.megatron.tp={opts.tp} does not divide model.n_head={n_head}"
    if opts.pp > 1:
        return "backends.megatron.pp > 1: pipeline parallelism is not implemented by this backend yet (use tp/dp)"
    return None


def version() -> str | None:
    return package_version("megatron-core")


# ---- the CPU shim -------------------------------------------------------------------------------------


class CpuShim:
    """Maps Megatron's CUDA-only RNG tracker and `torch.cuda.current_device()` onto the CPU, reversibly.

    Megatron-core 0.16 calls `torch.cuda.current_device()` to place tensors and keeps a "CUDA" RNG state
    for tensor-parallel dropout; neither exists in a CPU build of torch. The shim replaces exactly those
    hooks while a Megatron run is live and restores them in `remove()`; nothing else in torch is touched.
    """

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def install(self) -> None:
        from megatron.core.tensor_parallel import random as mrandom

        self._patch(torch.cuda, "current_device", lambda: "cpu")
        self._patch(mrandom, "_get_cuda_rng_state", lambda *a, **k: torch.get_rng_state())
        self._patch(mrandom, "_set_cuda_rng_state", lambda state, *a, **k: torch.set_rng_state(state))
        # CudaRNGStatesTracker.add seeds a fresh state with torch.cuda.manual_seed / get_rng_state
        self._patch(mrandom.CudaRNGStatesTracker, "add", _cpu_tracker_add)

    def remove(self) -> None:
        while self._saved:
            owner, name, value = self._saved.pop()
            setattr(owner, name, value)


def _cpu_tracker_add(self: Any, name: str, seed: int) -> None:
    self._is_initialized = True
    if seed in self.seeds_ or name in self.states_:
        raise Exception(f"rng state {name!r} / seed {seed} already exists")
    self.seeds_.add(seed)
    self.states_[name] = torch.Generator().manual_seed(seed).get_state()


# ---- weight mapping: suite GPT -> Megatron GPTModel ----------------------------------------------------


def _shard(t: torch.Tensor, dim: int, rank: int, tp: int) -> torch.Tensor:
    return t.chunk(tp, dim=dim)[rank].contiguous()


def megatron_state(ref: Any, n_head: int, tp: int, tp_rank: int, padded_vocab: int) -> dict[str, torch.Tensor]:
    """The reference GPT's weights under Megatron's names and layouts, this TP rank's shard."""
    sd = {k: v.detach() for k, v in ref.state_dict().items()}
    d = sd["wte.weight"].shape[1]
    head_dim = d // n_head
    wte = sd["wte.weight"]
    if padded_vocab > wte.shape[0]:  # padded rows see no gradient: the loss only reads the real vocabulary
        wte = torch.cat([wte, wte.new_zeros(padded_vocab - wte.shape[0], d)])
    out = {
        "embedding.word_embeddings.weight": _shard(wte, 0, tp_rank, tp),
        "embedding.position_embeddings.weight": sd["wpe.weight"],
        "decoder.final_layernorm.weight": sd["ln_f.weight"],
    }
    if "ln_f.bias" in sd:
        out["decoder.final_layernorm.bias"] = sd["ln_f.bias"]
    if "lm_head.weight" in sd and not ref.cfg.tie_embeddings:
        lm = sd["lm_head.weight"]
        if padded_vocab > lm.shape[0]:
            lm = torch.cat([lm, lm.new_zeros(padded_vocab - lm.shape[0], d)])
        out["output_layer.weight"] = _shard(lm, 0, tp_rank, tp)
    for i in range(ref.cfg.n_layer):
        p, m = f"blocks.{i}.", f"decoder.layers.{i}."
        # Megatron's fused QKV is grouped per head ([q_h; k_h; v_h] for each head); ours is [Q; K; V]
        qkv = sd[p + "qkv.weight"].view(3, n_head, head_dim, d).transpose(0, 1).reshape(3 * d, d)
        out[m + "self_attention.linear_qkv.weight"] = _shard(qkv, 0, tp_rank, tp)
        out[m + "self_attention.linear_proj.weight"] = _shard(sd[p + "proj.weight"], 1, tp_rank, tp)
        out[m + "input_layernorm.weight"] = sd[p + "ln_1.weight"]
        out[m + "pre_mlp_layernorm.weight"] = sd[p + "ln_2.weight"]
        out[m + "mlp.linear_fc1.weight"] = _shard(sd[p + "fc.weight"], 0, tp_rank, tp)
        out[m + "mlp.linear_fc2.weight"] = _shard(sd[p + "fc_out.weight"], 1, tp_rank, tp)
        if ref.cfg.bias:
            qkv_b = sd[p + "qkv.bias"].view(3, n_head, head_dim).transpose(0, 1).reshape(3 * d)
            out[m + "self_attention.linear_qkv.bias"] = _shard(qkv_b, 0, tp_rank, tp)
            out[m + "self_attention.linear_proj.bias"] = sd[p + "proj.bias"]
            out[m + "input_layernorm.bias"] = sd[p + "ln_1.bias"]
            out[m + "pre_mlp_layernorm.bias"] = sd[p + "ln_2.bias"]
            out[m + "mlp.linear_fc1.bias"] = _shard(sd[p + "fc.bias"], 0, tp_rank, tp)
            out[m + "mlp.linear_fc2.bias"] = sd[p + "fc_out.bias"]
    return out


class MegatronGPT(nn.Module):
    """Calls like the suite GPT: token ids [b, t] -> full-vocabulary logits [b, t, vocab] (gathered over TP).

    The workload's own loss and evaluation then run unchanged; the gather's backward hands each TP rank
    the gradient of its vocabulary shard.
    """

    def __init__(self, gpt: nn.Module, vocab_size: int):
        super().__init__()
        self.gpt = gpt
        self.vocab_size = vocab_size

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        pos = torch.arange(t, device=idx.device).unsqueeze(0).expand(b, t)
        # Megatron's default causal mask is built on "cuda"; an explicit one (True = masked) is the same mask
        mask = torch.ones(t, t, dtype=torch.bool, device=idx.device).triu(1).view(1, 1, t, t)
        logits = self.gpt(idx, pos, mask, runtime_gather_output=True)
        return logits[..., : self.vocab_size]


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

    def available(self) -> Availability:
        if importlib.util.find_spec("megatron.core") is None:
            return Availability(False, "megatron-core is not installed (pip install 'trainbench[megatron]')")
        v = version()
        if v is not None and int(v.split(".")[0]) == 0 and int(v.split(".")[1]) < 16:
            return Availability(False, f"megatron-core {v} is too old; this backend needs >= 0.16", v)
        if self.device.type not in ("cpu", "cuda"):
            return Availability(False, f"megatron-core runs on cuda (or cpu through a shim), not {self.device.type}", v)
        return Availability(True, version=v)

    def data_shard(self) -> tuple[int, int]:
        """(rank, world) for the data loader: tensor-parallel peers must read the same batch."""
        return self.dp_rank, self.dp

    def _init_parallel(self, tp: int, pp: int) -> None:
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
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
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
        if not on_cuda:
            self.shim = CpuShim()
            self.shim.install()
        from megatron.core import parallel_state, tensor_parallel
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.transformer.transformer_config import TransformerConfig

        self._init_parallel(o.tp, o.pp)
        seed = int(getattr(getattr(workload, "ctx", None), "seed", 0))
        tensor_parallel.model_parallel_cuda_manual_seed(seed + 1)

        ref: Any = workload.build_model()  # the suite GPT, built under the run's seed: the weights both backends share
        cfg: Any = ref.cfg
        vocab = int(ref.wte.weight.shape[0])
        padded_vocab = -(-vocab // o.tp) * o.tp
        bf16 = opts.precision == "bf16"
        if opts.precision not in ("fp32", "bf16"):
            raise ValueError(f"--precision {opts.precision}: the megatron backend supports fp32 and bf16")
        tcfg = TransformerConfig(
            num_layers=cfg.n_layer, hidden_size=cfg.d_model, num_attention_heads=cfg.n_head,
            ffn_hidden_size=cfg.mlp_ratio * cfg.d_model, add_bias_linear=cfg.bias,
            hidden_dropout=cfg.dropout, attention_dropout=cfg.dropout, layernorm_epsilon=1e-5,
            activation_func=torch.nn.functional.gelu, init_method_std=0.02,
            tensor_model_parallel_size=o.tp, pipeline_model_parallel_size=o.pp,
            use_cpu_initialization=True, perform_initialization=False,  # weights come from the reference
            bf16=bf16, params_dtype=torch.bfloat16 if bf16 else torch.float32,
            bias_dropout_fusion=False, masked_softmax_fusion=False, gradient_accumulation_fusion=False,
            apply_rope_fusion=False, persist_layer_norm=False,
        )
        gpt = GPTModel(
            config=tcfg, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=padded_vocab,
            max_sequence_length=cfg.seq_len, parallel_output=True,
            share_embeddings_and_output_weights=cfg.tie_embeddings, position_embedding_type="learned_absolute",
        )
        state = megatron_state(ref, cfg.n_head, o.tp, parallel_state.get_tensor_model_parallel_rank(), padded_vocab)
        missing, unexpected = gpt.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.endswith("_extra_state") and not (not cfg.bias and k.endswith("bias"))]
        if missing or unexpected:
            raise RuntimeError(f"megatron weight mapping is incomplete: missing {missing}, unexpected {unexpected}")
        if not cfg.bias:
            # Megatron's LayerNorms always carry a bias; the declarative model has none, so pin it at zero
            for name, p in gpt.named_parameters():
                if "layernorm" in name and name.endswith("bias"):
                    nn.init.zeros_(p)
                    p.requires_grad_(False)
        del ref
        gpt = gpt.to(self.device.torch)
        model: nn.Module = MegatronGPT(gpt, vocab)
        spec = workload.spec
        params = [p for p in gpt.parameters() if p.requires_grad]
        if on_cuda:
            train_model, optimizer = self._cuda_wrap(gpt, tcfg, bf16, spec)
            model = MegatronGPT(train_model, vocab)
        else:
            if bf16:
                # Megatron's linear layers are custom autograd functions that autocast does not reach, so
                # bf16 means bf16 weights (Float16Module). With a torch optimizer there are no fp32 master
                # weights on CPU: a correctness check of the bf16 path, not a training recipe.
                from megatron.core.transformer.module import Float16Module

                model = MegatronGPT(Float16Module(tcfg, gpt), vocab)
            if self.dp > 1:  # average gradients over the data-parallel group only (TP peers hold shards)
                model = nn.parallel.DistributedDataParallel(
                    model, process_group=parallel_state.get_data_parallel_group())
            optimizer = build_optimizer(spec.optimizer, params)
        # Megatron's optimizer is no torch Optimizer: on CUDA the same schedule is applied by hand in train_step
        self._lr_mult = lr_multiplier(spec.schedule, spec.budget.max_steps)
        self._base_lr = spec.optimizer.lr
        self._step = 0
        scheduler = None if on_cuda else build_scheduler(spec.schedule, optimizer, spec.budget.max_steps)
        self.workload = workload
        return TrainState(model=model, raw_model=gpt, optimizer=optimizer, scheduler=scheduler,
                          extra={"eval": model.module if isinstance(model, nn.parallel.DistributedDataParallel)
                                 else model})

    def _cuda_wrap(self, gpt: nn.Module, tcfg: Any, bf16: bool, spec: Any) -> tuple[nn.Module, Any]:
        """Megatron DDP (+ Float16Module for bf16) and Megatron's (distributed) optimizer, on CUDA."""
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.transformer.module import Float16Module

        module: nn.Module = Float16Module(tcfg, gpt) if bf16 else gpt
        ddp_cfg = DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, overlap_grad_reduce=False,
            use_distributed_optimizer=self.opts.use_distributed_optimizer)
        module = DistributedDataParallel(config=tcfg, ddp_config=ddp_cfg, module=module)
        o = spec.optimizer
        name = {"adamw": "adam", "adam": "adam", "sgd": "sgd"}.get(o.name)
        if name is None:
            raise ValueError(f"optimizer.name {o.name!r}: Megatron's optimizer offers adam(w) and sgd on CUDA")
        extra = o.params()
        betas = extra.get("betas", (0.9, 0.999))
        ocfg = OptimizerConfig(
            optimizer=name, lr=o.lr, weight_decay=o.weight_decay, bf16=bf16,
            adam_beta1=float(betas[0]), adam_beta2=float(betas[1]), adam_eps=float(extra.get("eps", 1e-8)),
            sgd_momentum=float(extra.get("momentum", 0.0)),
            use_distributed_optimizer=self.opts.use_distributed_optimizer,
            clip_grad=self.opts.grad_clip or 0.0,
        )
        optimizer = get_megatron_optimizer(ocfg, [module])
        self._megatron_optimizer = True
        return module, optimizer

    def train_step(self, state: TrainState, batch: Batch) -> StepOut:
        batch = to_device(batch, self.device.torch)
        opt = state.optimizer
        if getattr(self, "_megatron_optimizer", False):
            ddp: Any = state.model.gpt
            for group in opt.param_groups:
                group["lr"] = self._base_lr * self._lr_mult(self._step)
            ddp.zero_grad_buffer()
            opt.zero_grad()
            loss = self.workload.loss(state.model, batch)
            loss.backward()
            ddp.finish_grad_sync()
            opt.step()
            self._step += 1
            return StepOut(loss.detach())
        else:
            opt.zero_grad(set_to_none=True)
            with self._autocast():
                loss = self.workload.loss(state.model, batch)
            loss.backward()
            if self.opts.grad_clip:
                nn.utils.clip_grad_norm_([p for p in state.raw_model.parameters() if p.grad is not None],
                                         self.opts.grad_clip)
            opt.step()
        state.scheduler.step()
        return StepOut(loss.detach())

    def eval_model(self, state: TrainState) -> nn.Module:
        return state.extra["eval"]

    def synchronize(self) -> None:
        self.device.synchronize()

    def parallel_layout(self) -> dict[str, Any]:
        return {"dp": self.dp, "tp": self.opts.tp, "pp": self.opts.pp, "zero_stage": None, "offload": None,
                "distributed_optimizer": bool(getattr(self, "_megatron_optimizer", False)
                                              and self.opts.use_distributed_optimizer)}

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

"""DeepSpeed: ZeRO stages 0-3, bf16/fp16, optimizer and parameter offload, gradient accumulation (the spec's
micro-batches), `--compile` (the engine's own `compile()`), activation checkpointing (DeepSpeed's
`checkpointing.checkpoint` around each transformer block); model-agnostic.

Layouts: data parallel only (sharding is ZeRO's, chosen by `zero_stage`). DeepSpeed's pipeline engine is
refused: `PipelineModule` needs the model rewritten as a list of layers and drives its own data iterator and
loss (`train_batch`), which bypasses the workload contract (`loss(model, batch)`, the harness's clock).

The spec's `backends.deepspeed` block is validated (pydantic) and turned into a ds_config; `ds_config`
merges raw DeepSpeed keys over it for experts. The spec's own optimizer and schedule (built by
suite.algorithms) are handed to DeepSpeed as client objects, so the update rule is the one the torch
backend runs and no fused kernel is JIT-built. On CPU (FACTS.md): gloo, the shm-op build skipped, torch Adam.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.util
import logging
import os
import socket
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn

from suite import devices
from suite.algorithms.optimizers import build_optimizer
from suite.algorithms.schedules import build_scheduler
from suite.backends import translate
from suite.backends.availability import Availability
from suite.backends.base import Backend, RunOptions, StepOut, TrainState
from suite.backends.deepspeed import zero3 as hf_zero3
from suite.backends.deepspeed.options import Options, available_installed, supports
from suite.backends.parallel.checkpoint import _layers, recompute_fraction
from suite.backends.torch.backend import split_batch, to_device
from suite.measure.fingerprint import package_version
from suite.models.common import moe
from suite.workloads.contract import Batch, Workload


def version() -> str | None:
    return package_version("deepspeed")


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def ds_config(opts: Options, precision: str, global_batch: int, dp: int,
              micro_batch_size: int | None = None) -> dict[str, Any]:
    """The DeepSpeed config that the validated options mean (before the raw `ds_config` passthrough).

    The spec's `data.micro_batch_size` (per data-parallel rank) sets the accumulation steps when given.
    """
    ga = opts.gradient_accumulation_steps
    if micro_batch_size is not None:
        if global_batch % (dp * micro_batch_size):
            raise ValueError(f"data.micro_batch_size {micro_batch_size} x {dp} data-parallel ranks does not divide "
                             f"data.batch_size {global_batch}")
        derived = global_batch // (dp * micro_batch_size)
        if ga not in (1, derived):
            raise ValueError(f"backends.deepspeed.gradient_accumulation_steps {ga} contradicts data.micro_batch_size "
                             f"{micro_batch_size} ({derived} micro-batches); drop the backend option")
        ga = derived
    if global_batch % (dp * ga):
        raise ValueError(f"data.batch_size {global_batch} is not divisible by data-parallel ranks {dp} x "
                         f"backends.deepspeed.gradient_accumulation_steps {ga}")
    zero: dict[str, Any] = {"stage": opts.zero_stage}
    if opts.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": opts.offload_optimizer}
    if opts.offload_param != "none":
        zero["offload_param"] = {"device": opts.offload_param}
    cfg: dict[str, Any] = {
        "train_batch_size": global_batch,
        "train_micro_batch_size_per_gpu": global_batch // (dp * ga),
        "gradient_accumulation_steps": ga,
        "zero_optimization": zero,
        # the client optimizer is a torch one: allow it under ZeRO and with offload (no DeepSpeedCPUAdam build)
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    # always explicit: DeepSpeed 0.19.8 clips at 1.0 by default, which the torch backend (and the spec) do not
    cfg["gradient_clipping"] = opts.grad_clip or 0.0
    if precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": opts.loss_scale}
    return _merge(cfg, opts.ds_config)


def _skip_shm_build() -> None:
    """On CPU every deepspeed.initialize JIT-compiles a shared-memory comm op (~2 min); gloo needs none of it.

    The module must be fetched with importlib: `import deepspeed.comm.torch as m` binds the torch package.
    """
    mod = importlib.import_module("deepspeed.comm.torch")
    if hasattr(mod, "build_shm_op"):
        setattr(mod, "build_shm_op", lambda: None)  # noqa: B010 - patching a module attribute


DIST_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _ensure_dist_env() -> dict[str, str | None]:
    """DeepSpeed reads RANK/WORLD_SIZE/LOCAL_RANK/MASTER_*; without them (one process) it tries MPI and fails.

    Returns what was there before, so close() can put the environment back: a leaked WORLD_SIZE would make
    a later `trainbench run --nproc 2` in the same process (tests) believe it is already under torchrun.
    """
    saved = {k: os.environ.get(k) for k in DIST_ENV}
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    return saved


def _import_deepspeed(device_type: str | None = None) -> Any:
    """Import deepspeed with its log on stderr: it logs to stdout, which `trainbench run --json` keeps for JSON.

    On a CPU, DeepSpeed's accelerator is named (DS_ACCELERATOR=cpu): its auto-detection lands on the same CPU
    accelerator, but warns "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to
    detect it" on every run, `--quiet` or not."""
    if device_type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if "deepspeed" in sys.modules:
        return sys.modules["deepspeed"]
    with contextlib.redirect_stdout(sys.stderr):
        import deepspeed
    for handler in logging.getLogger("DeepSpeed").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.__stdout__:
            handler.setStream(sys.stderr)
    return deepspeed


class DeepSpeedBackend(Backend):
    name: ClassVar[str] = "deepspeed"
    Options = Options
    supports = staticmethod(supports)

    def __init__(self, device: devices.Device):
        self.device = device
        self.opts = Options()
        self.world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        self._autocast_off: Any = nullcontext

    def available(self) -> Availability:
        return available_installed(self.device.type)

    def setup(self, workload: Workload, opts: RunOptions) -> TrainState:
        reason = supports(workload.spec)
        if reason:
            raise ValueError(reason)
        self.opts = o = Options.model_validate(opts.options)
        par = workload.spec.parallel
        self.fsdp = par.fsdp if par is not None else 1
        if self.fsdp > 1:  # the spec's sharding, in DeepSpeed's words
            o = self.opts = o.model_copy(update={"zero_stage": 3})
        if opts.precision not in ("fp32", "bf16", "fp16"):  # other recipes are the torch backend's own
            raise ValueError(f"--precision {opts.precision}: the deepspeed backend supports fp32, bf16 and fp16")
        if self.device.type == "cpu":
            if opts.precision == "fp16":  # DeepSpeed's CPU accelerator refuses fp16 deep inside initialize
                raise ValueError("--precision fp16: DeepSpeed's CPU accelerator has no fp16; use bf16 or fp32 on CPU")
            _import_deepspeed("cpu")  # first, so that its import-time log goes to stderr
            _skip_shm_build()
        self._saved_env = _ensure_dist_env()
        deepspeed = _import_deepspeed(self.device.type)

        # also over a process group already there: DeepSpeed's own comm layer (which its activation checkpointing
        # asks for its rank before `initialize`) wraps it
        deepspeed.init_distributed(dist_backend=self.device.dist_backend, auto_mpi_discovery=False)
        self.world = dist.get_world_size()
        if self.fsdp > 1 and self.world != self.fsdp:
            raise ValueError(translate.hybrid_refusal(self.fsdp, self.world // self.fsdp) if self.world % self.fsdp
                             == 0 else f"parallel.fsdp={self.fsdp} does not divide the {self.world} processes")
        spec = workload.spec
        config = ds_config(o, opts.precision, spec.data.batch_size, self.world, spec.data.micro_batch_size)
        half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(opts.precision)
        # ZeRO-3: a model that loads a checkpoint builds already partitioned, each rank reading its own share
        with hf_zero3.zero3_build(deepspeed, config, half) if o.zero_stage == 3 else nullcontext():
            raw = workload.build_model().to(self.device.torch)
        if any(isinstance(m, moe.MoE) for m in raw.modules()):
            # the load-balancing loss joins the gradient inside the model (moe._AttachAuxLoss): DeepSpeed's 1/GA
            # scaling of each micro-batch's loss is applied to it here; fp16's dynamic loss scale is not
            if opts.precision == "fp16":
                raise ValueError("--precision fp16 with a Mixture-of-Experts model: DeepSpeed's loss scale would not "
                                 "reach the load-balancing loss; use bf16 or fp32")
            moe.set_aux_loss_grad_scale(1.0 / config["gradient_accumulation_steps"])
        self.ac = spec.parallel.ac if spec.parallel is not None else "none"
        self.recompute = recompute_fraction(self.ac, raw)
        if self.ac != "none":
            _checkpoint_blocks(raw, deepspeed)
        # only what trains: a frozen base (LoRA) gets no optimizer state, as in the torch backend
        optimizer = build_optimizer(spec.optimizer, [p for p in raw.parameters() if p.requires_grad])
        scheduler = build_scheduler(spec.schedule, optimizer, spec.budget.max_steps)
        engine, ds_opt, _, ds_sched = deepspeed.initialize(
            model=raw, optimizer=optimizer, lr_scheduler=scheduler, config=config)
        if opts.compile:
            engine.compile()  # DeepSpeed's own: torch.compile of the module it owns, with its hooks in place
        self.compiled = bool(opts.compile)
        self.config = config
        self.workload = workload
        self.micro = config["gradient_accumulation_steps"]
        self.cast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(opts.precision)
        self._call = _EngineCall(engine, self.cast_dtype)
        return TrainState(model=engine, raw_model=raw, optimizer=ds_opt, scheduler=ds_sched,
                          extra={"eval": _EvalView(engine, self.cast_dtype)})

    def train_step(self, state: TrainState, batch: Batch) -> StepOut:
        batch = to_device(batch, self.device.torch)
        engine: Any = state.model
        chunks = split_batch(batch, self.micro)
        total = torch.zeros((), device=self.device.torch)
        for micro in chunks:  # DeepSpeed scales each by 1/GA and steps the optimizer at the boundary
            loss = self.workload.loss(self._call, micro)
            engine.backward(loss)
            engine.step()
            total += loss.detach().float()
        return StepOut(total / len(chunks))

    def eval_model(self, state: TrainState) -> nn.Module:
        return state.extra["eval"]

    # --checkpoint-every: DeepSpeed's own checkpoint (the module, its optimizer and ZeRO partitions, the lr scheduler
    # given to initialize, its step counters), one tag per step folder; the harness keeps the RNG and data order
    checkpoint_format: ClassVar[str | None] = "deepspeed"
    CHECKPOINT_TAG: ClassVar[str] = "engine"

    def save_checkpoint(self, state: TrainState, folder: Path) -> None:
        engine: Any = state.model
        engine.save_checkpoint(str(folder), tag=self.CHECKPOINT_TAG, save_latest=False)  # ends in a barrier

    def load_checkpoint(self, state: TrainState, folder: Path) -> None:
        engine: Any = state.model
        path, _ = engine.load_checkpoint(str(folder), tag=self.CHECKPOINT_TAG)
        if path is None:
            raise RuntimeError(f"{folder}: DeepSpeed found no checkpoint (tag {self.CHECKPOINT_TAG!r}) to load")

    def synchronize(self) -> None:
        self.device.synchronize()

    def parallel_layout(self) -> dict[str, Any]:
        o = self.opts
        offload = [k for k, v in (("optimizer", o.offload_optimizer), ("param", o.offload_param)) if v != "none"]
        zero = getattr(self, "config", {}).get("zero_optimization", {}).get("stage", o.zero_stage)
        ga = getattr(self, "micro", o.gradient_accumulation_steps)
        fsdp = getattr(self, "fsdp", 1)
        sharding = translate.layout_record(translate.fsdp_mapping("deepspeed", fsdp)) if fsdp > 1 else {}
        return {"dp": self.world // fsdp, "fsdp": 1, "tp": 1, "pp": 1, "cp": 1, **sharding, "zero_stage": zero,
                "offload": ",".join(offload) or None, "gradient_accumulation_steps": ga, "micro_batches": ga,
                "ac": getattr(self, "ac", "none"), "activation_checkpointing": getattr(self, "ac", "none"),
                "compile": getattr(self, "compiled", False)}

    def recompute_fraction(self) -> float | None:
        return getattr(self, "recompute", 0.0)

    def close(self) -> None:
        # the process group stays for later seeds of this process (DeepSpeed caches it); the env goes back
        for k, v in getattr(self, "_saved_env", {}).items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._saved_env = {}


def _checkpoint_blocks(model: nn.Module, deepspeed: Any) -> None:
    """DeepSpeed's activation checkpointing around each of the model's `blocks` (configured for no model
    parallelism: nothing to partition)."""
    blocks = _layers(model)  # the GPT's `blocks`, the Llama-class decoder's `layers`
    if blocks is None:
        raise ValueError("--ac full wraps the model's transformer layers (`blocks` or `layers`); this model has none")
    deepspeed.checkpointing.configure(None, partition_activations=False, checkpoint_in_cpu=False)
    for i, block in enumerate(blocks):
        blocks[i] = _Checkpointed(block, deepspeed.checkpointing.checkpoint)


class _Checkpointed(nn.Module):
    def __init__(self, block: nn.Module, checkpoint: Any):
        super().__init__()
        self.block = block
        self._checkpoint = checkpoint

    def forward(self, x: torch.Tensor, *args: Any) -> torch.Tensor:  # the Llama's layers take (x, cos, sin, ...)
        return self._checkpoint(self.block, x, *args) if self.training else self.block(x, *args)


def _cast(x: Any, dtype: torch.dtype | None) -> Any:
    """Floating inputs follow the engine's half dtype (DeepSpeed casts the weights, not the inputs)."""
    if dtype is None:
        return x
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.to(dtype)
    return x


class _EngineCall(nn.Module):
    """Lets the workload's `loss(model, batch)` call the engine like its own model; outputs come back fp32."""

    def __init__(self, engine: Any, cast_dtype: torch.dtype | None):
        super().__init__()
        self.engine = engine
        self.cast_dtype = cast_dtype

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self.engine(*(_cast(a, self.cast_dtype) for a in args), **kwargs)
        if self.cast_dtype is None:
            return out
        if isinstance(out, tuple):  # e.g. PPO's (policy head, value)
            return tuple(o.float() if isinstance(o, torch.Tensor) else o for o in out)
        return out.float() if isinstance(out, torch.Tensor) else out

    @property
    def module(self) -> nn.Module:
        """The workload's own model inside the engine: a workload that calls its model's methods besides
        forward (PPO's `distribution`, `obs_norm`) finds them here, as it would under DDP."""
        return self.engine.module


class _EvalView(_EngineCall):
    """The engine as the workload evaluates it: the same (possibly ZeRO-3-partitioned) weights, eval/train modes."""

    def train(self, mode: bool = True) -> _EvalView:
        self.engine.train(mode)
        self.training = mode
        return self

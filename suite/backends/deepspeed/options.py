"""What the DeepSpeed backend accepts: the spec's `backends.deepspeed` block (`Options`) and `supports` (read from the
spec alone: no torch, no DeepSpeed, so `trainbench list --json` answers at once). suite/backends/deepspeed/backend.py
re-exports both."""

from __future__ import annotations

import importlib.util
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from suite.backends import translate
from suite.backends.availability import Availability
from suite.backends.limits import Limit
from suite.measure.fingerprint import package_version


class Options(BaseModel):
    """The spec's `backends.deepspeed` block."""

    model_config = ConfigDict(extra="forbid")
    zero_stage: Literal[0, 1, 2, 3] = 0
    offload_optimizer: Literal["none", "cpu"] = Field(default="none", description="ZeRO >= 1: optimizer state on CPU")
    offload_param: Literal["none", "cpu"] = Field(default="none", description="ZeRO 3 only: parameters on CPU")
    gradient_accumulation_steps: int = Field(
        default=1, ge=1, description="micro-batches per optimizer step (prefer the spec's data.micro_batch_size)")
    grad_clip: float | None = Field(default=None, gt=0)
    loss_scale: float = Field(default=0.0, ge=0, description="fp16: 0 = dynamic loss scaling")
    ds_config: dict[str, Any] = Field(default_factory=dict, description="raw DeepSpeed config merged over the rest")


def supports(spec: Any) -> str | None:
    """DeepSpeed wraps any nn.Module: every domain runs. Only the block's own consistency is checked."""
    try:
        opts = Options.model_validate(spec.backends.get("deepspeed", {}))
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return f"backends.deepspeed: {e}"
    if opts.offload_param != "none" and opts.zero_stage != 3:
        return "backends.deepspeed.offload_param needs zero_stage: 3"
    if opts.offload_optimizer != "none" and opts.zero_stage == 0:
        return "backends.deepspeed.offload_optimizer needs zero_stage >= 1"
    par = getattr(spec, "parallel", None)
    if par is not None:
        # fsdp=N is ZeRO-3 over N ranks (suite/backends/translate.py); refused only where DeepSpeed cannot say it
        reason = translate.deepspeed_refusal(par, opts.zero_stage, "zero_stage" in opts.model_fields_set)
        if reason:
            return reason
        if par.tp > 1 or par.pp > 1:
            return ("parallel.tp/pp: this backend runs data parallel (ZeRO) only; DeepSpeed's pipeline engine "
                    "needs the model as a PipelineModule and owns the loss and data loop, outside the workload contract")
        if par.ep > 1:
            return (f"--parallel ep={par.ep}: this backend does not wire DeepSpeed's MoE layer; expert parallelism "
                    "runs in the torch and megatron backends")
        if par.ac == "selective":
            return "parallel.ac=selective: DeepSpeed checkpoints whole blocks; use --ac full"
    return None


def limit(spec: Any) -> Limit:
    """The kind of this engine's refusal of `spec` (suite/backends/limits.py `classify`)."""
    par = spec.parallel
    if par is not None and par.pp > 1:
        return Limit("engine limit", "DeepSpeed's pipeline engine takes the model as a deepspeed.pipe.PipelineModule "
                     "and drives its own data iterator and loss (engine.train_batch), and refuses ZeRO-2/3 under "
                     "pipeline parallelism (deepspeed/runtime/pipe/engine.py)")
    return Limit("not wired", "DeepSpeed holds it (AutoTP, DeepSpeed-MoE's deepspeed.moe.layer.MoE, MiCS); this "
                 "backend wires ZeRO data parallelism and activation checkpointing")


def available_installed(device_type: str) -> Availability:
    if importlib.util.find_spec("deepspeed") is None:
        return Availability(False, "deepspeed is not installed (pip install 'trainbench-suite[deepspeed]')")
    if device_type not in ("cpu", "cuda", "npu"):
        return Availability(False, f"deepspeed does not run on {device_type}", package_version("deepspeed"))
    return Availability(True, version=package_version("deepspeed"))


def fsdp_mechanism(device_type: str) -> tuple[str, bool, bool, bool]:
    """What holds `parallel.fsdp` (suite/backends/translate.py): mechanism, parameters, gradients, optimizer sharded."""
    return ("ZeRO-3", True, True, True)

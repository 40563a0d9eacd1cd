"""What the Megatron backend accepts: the spec's `backends.megatron` block (`Options`), the tp x pp degrees a spec
asks for, and `supports` (the reason a spec cannot run here, or None; it builds no model)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from suite.backends import translate
from suite.backends.availability import Availability, has_submodule
from suite.backends.layout import is_gpt, is_pretrained_llama
from suite.backends.limits import LM_ARCHS, Limit, arch
from suite.backends.megatron import llama_refusals as megatron_llama  # not llama.py: it imports torch
from suite.backends.megatron import lora as megatron_lora
from suite.measure.fingerprint import package_version

SUPPORTED_ARCHS = ("gpt",)


class Options(BaseModel):
    """The spec's `backends.megatron` block."""

    model_config = ConfigDict(extra="forbid")
    tp: int = Field(default=1, ge=1, description="tensor-parallel degree (prefer the spec's parallel.tp)")
    pp: int = Field(default=1, ge=1, description="pipeline-parallel degree (prefer the spec's parallel.pp)")
    use_distributed_optimizer: bool = Field(default=True, description="CUDA only: Megatron's ZeRO-1 optimizer")
    sequence_parallel: bool | None = Field(
        default=None, description="Megatron sequence parallelism with tp > 1 (prefer the spec's parallel.sp; "
        "default: on where Transformer Engine's layer spec is used, which it needs)")
    grad_clip: float | None = Field(default=None, gt=0)


def supports(spec: Any) -> str | None:
    """None if this backend can run the spec, else the reason it cannot."""
    llama = megatron_llama.is_llama_family(spec.model.arch)
    if not (is_gpt(spec.model.arch) or llama):
        return (f"megatron builds a Megatron GPTModel and runs transformer LM workloads only (model.arch gpt, "
                f"llama or hf_llama); this spec's model.arch is {spec.model.arch!r}")
    try:
        opts = Options.model_validate(spec.backends.get("megatron", {}))
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return f"backends.megatron: {e}"
    try:
        tp, pp = degrees(spec, opts)
    except ValueError as e:
        return str(e)
    if llama:
        reason = megatron_llama.refusal(spec, tp, pp)
        if not reason and is_pretrained_llama(spec.model.arch):
            reason = megatron_lora.refusal(spec)  # LoRA: Megatron's own adapters (suite/backends/megatron/lora.py)
        if reason:
            return reason
    elif spec.parallel is not None and spec.parallel.ep > 1:
        return f"--parallel ep={spec.parallel.ep}: expert parallelism needs a Mixture-of-Experts model (arch llama)"
    params = spec.model.params()
    n_head, n_layer = int(params.get("n_head", 1)), int(params.get("n_layer", 1))  # the llama's: refusal() above
    if n_head % tp and not llama:
        return f"tensor parallelism tp={tp} does not divide model.n_head={n_head}"
    if n_layer % pp and not llama:
        return f"pipeline parallelism pp={pp} does not divide model.n_layer={n_layer} (Megatron splits layers evenly)"
    par = spec.parallel
    if par is not None and par.schedule == "interleaved" and pp > 1:
        return "parallel.schedule interleaved: Megatron's virtual pipeline stages are not wired; use 1f1b"
    if par is not None and par.loss_parallel is False and tp > 1:
        return ("parallel.loss_parallel=false: Megatron always computes the vocab-parallel cross-entropy over the "
                "tp group (leave loss_parallel unset)")
    # fsdp=N: the distributed optimizer on CUDA, ZeroRedundancyOptimizer on CPU (suite/backends/translate.py)
    return translate.megatron_refusal(par)


def sequence_parallel_wanted(spec: Any, opts: Options) -> bool | None:
    """The spec's parallel.sp, else backends.megatron.sequence_parallel (older specs); None: the default."""
    par = spec.parallel
    if par is not None and par.sp is not None:
        return bool(par.sp)
    return opts.sequence_parallel


def degrees(spec: Any, opts: Options) -> tuple[int, int]:
    """(tp, pp): the spec's parallel block, or the backend block's (older specs); refused when they disagree."""
    par = spec.parallel
    if par is None:
        return opts.tp, opts.pp
    for dim, legacy in (("tp", opts.tp), ("pp", opts.pp)):
        if legacy != 1 and legacy != getattr(par, dim):
            raise ValueError(f"backends.megatron.{dim}={legacy} contradicts parallel.{dim}={getattr(par, dim)}; "
                             f"drop backends.megatron.{dim}")
    return par.tp, par.pp


def limit(spec: Any) -> Limit:
    """The kind of this engine's refusal of `spec` (suite/backends/limits.py `classify`)."""
    if arch(spec) not in LM_ARCHS:
        return Limit("engine limit", "megatron-core builds language models only (megatron.core.models: gpt, bert, "
                     "T5, mamba, multimodal, mimo and the vision encoders multimodal LLMs use): no diffusion "
                     "transformer, CNN, GNN, recommender or RL policy network")
    return Limit("not wired", "Megatron-core's GPTModel and TransformerConfig hold Llama-class decoders; the "
                 "refusal names the feature this backend's weight map or layout does not carry over yet")


def available_installed(device_type: str) -> Availability:
    if not has_submodule("megatron", "core"):
        return Availability(False, "megatron-core is not installed (pip install 'trainbench-suite[megatron]')")
    v = package_version("megatron-core")
    if v is not None and int(v.split(".")[0]) == 0 and int(v.split(".")[1]) < 16:
        return Availability(False, f"megatron-core {v} is too old; this backend needs >= 0.16", v)
    if device_type not in ("cpu", "cuda"):
        return Availability(False, f"megatron-core runs on cuda (or cpu through a shim), not {device_type}", v)
    return Availability(True, version=v)


def fsdp_mechanism(device_type: str) -> tuple[str, bool, bool, bool]:
    """What holds `parallel.fsdp` (suite/backends/translate.py): Megatron's distributed optimizer on CUDA (optimizer
    state sharded, parameters and gradients whole), its CPU stand-in elsewhere."""
    if device_type == "cuda":
        return ("Megatron's distributed optimizer", False, False, True)
    return ("torch ZeroRedundancyOptimizer (ZeRO-1, the CPU stand-in for Megatron's distributed optimizer, which "
            "needs CUDA)", False, False, True)

"""What the torchtitan backend accepts: the spec's `backends.torchtitan` block (`Options`) and `supports` (read from
the spec alone: no torch, no torchtitan, so `trainbench list --json` answers at once).
suite/backends/torchtitan/backend.py re-exports them."""

from __future__ import annotations

import importlib.util
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from suite.backends import availability
from suite.backends import layout as layouts
from suite.backends.limits import Limit, arch
from suite.measure.fingerprint import package_version

HF_LLAMA_TASKS = ("language_model", "causal_lm_samples")  # hf_llama under torchtitan: fine-tuning, LoRA or whole
NO_CPU_BACKWARD = ("FlexAttention has no backward on CPU (torch raises \"FlexAttention does not support backward "
                   "on CPU\"): torchtitan's language-model attention (flex, flex_flash, varlen) trains on CUDA only")


class Options(BaseModel):
    """The spec's `backends.torchtitan` block."""

    model_config = ConfigDict(extra="forbid")
    attention: Literal["sdpa", "flex", "varlen"] = Field(
        default="sdpa", description="torchtitan's inner attention: sdpa (causal; trains on CPU) or its LM default flex")
    grad_clip: float | None = Field(default=None, gt=0)


def _supports_flux(spec: Any) -> str | None:
    par = spec.parallel
    if par is not None and (par.tp > 1 or par.pp > 1 or par.cp > 1 or par.ep > 1 or par.ac == "selective"):
        return ("parallel: torchtitan's Flux (parallelize_flux) shards with FSDP2 (fsdp, and dp as its replicate "
                "dimension) and checkpoints whole blocks (ac=full); it has no tensor, pipeline, context or expert "
                "parallel plan and no selective checkpointing")
    return None


def _supports_lora(spec: Any, params: dict[str, Any]) -> str | None:
    """hf_llama's LoRA through torchtitan's LoRAConverter (suite/backends/torchtitan/model.py, `lora_targets`)."""
    from suite.models.common.configs import LoraConfig

    if params.get("moe"):
        return ("model.lora on an MoE model: torchtitan's LoRAConverter matches Linear configs by their last name and "
                "would adapt the shared experts' w1-w3 with the dense ones; not wired")
    try:
        lora = LoraConfig.model_validate(params["lora"])
        targets = lora.suite_targets(bool(params.get("fused_qkv")))
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return f"model.lora: {e}"
    if ("wk" in targets) != ("wv" in targets):
        return (f"lora.target_modules {lora.target_modules}: torchtitan's QKVLinear builds wk and wv from one Linear "
                "config (`wkv`), so its LoRAConverter adapts both or neither; target both k_proj and v_proj")
    par = spec.parallel
    if par is not None and (par.tp > 1 or par.pp > 1):
        return ("parallel.tp / parallel.pp with model.lora: torchtitan derives the adapters' tensor-parallel layout "
                "from the base linear's (components/lora.py) and its pipeline splits the converted model; neither is "
                "wired or tested with adapters here (dp, fsdp and ac are taken as for model.arch llama)")
    return None


def supports(spec: Any) -> str | None:
    """Pure (no framework import): torchtitan builds the suite's `llama` family (dense and MoE presets), `hf_llama`
    (the same decoder from a Hugging Face checkpoint, LoRA through torchtitan's LoRAConverter) and `flux`
    (torchtitan's FluxModel: suite/backends/torchtitan/flux.py)."""
    if str(spec.model.arch) == "flux":
        return _supports_flux(spec)
    if not (layouts.is_llama(spec.model.arch) or layouts.is_pretrained_llama(spec.model.arch)):
        return (f"model.arch {spec.model.arch!r}: the torchtitan backend builds torchtitan's Llama 3 and DeepSeek-V3 "
                "models from the suite's `llama` configs (dense and MoE presets); use model.arch llama")
    if layouts.is_pretrained_llama(spec.model.arch) and str(spec.task) not in HF_LLAMA_TASKS:
        return (f"model.arch 'hf_llama' with task {spec.task!r}: the torchtitan backend builds hf_llama for supervised "
                f"fine-tuning ({', '.join(HF_LLAMA_TASKS)}: the checkpoint's weights, LoRA through torchtitan's "
                "LoRAConverter); RL on a Hugging Face checkpoint is not wired")
    try:
        opts = Options.model_validate(spec.backends.get("torchtitan", {}))
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return f"backends.torchtitan: {e}"
    del opts
    from suite.models.llama import presets as llm_presets

    params = llm_presets.expand(dict(spec.model.params()))
    if params.get("lora") and (reason := _supports_lora(spec, params)):
        return reason
    par = spec.parallel
    if par is None:
        return None
    if par.ep > 1 and not params.get("moe"):
        return (f"parallel.ep={par.ep} on a dense model: expert parallelism shards the experts of a Mixture-of-Experts "
                "preset (e.g. model.preset deepseek-v3-tiny); drop parallel.ep")
    if par.pp > 1 and (par.tp > 1 or par.fsdp > 1 or (par.dp or 1) > 1):
        return ("parallel.pp with dp/fsdp/tp: torchtitan's pipeline (pipeline_llm, suite/backends/torchtitan/pipeline.py) "
                "is wired with ep and ac (DeepSeek-V3's layout); its composition with dp/fsdp/tp is not tested")
    if par.pp > 1 and getattr(spec, "checkpoint", None) is not None:
        return ("checkpoint with parallel.pp under torchtitan: its pipeline's stages (pipeline_llm) are not mapped to "
                "the whole model's names for torchtitan's CheckpointManager here (the torch backend's pp checkpoints "
                "are: suite/backends/parallel/state_names.py); drop --checkpoint-every or use --backend torch")
    if par.cp > 1:
        return "parallel.cp: context parallel needs torchtitan's CP-sharded inputs and loss; not wired"
    if par.tp > 1 and par.loss_parallel is False:
        return ("parallel.loss_parallel=false: torchtitan's tensor-parallel plan always shards the LM head's logits "
                "by vocabulary (its lm_head output is Shard(-1)); leave loss_parallel unset or true")
    if par.tp > 1:
        if params.get("qk_norm"):
            return ("parallel.tp with model.qk_norm: torchtitan's Llama 3 sharding plan (set_llama3_sharding_config) "
                    "gives the per-head q/k norms no layout; run it with tp=1")
        if params.get("moe"):
            return ("parallel.tp with an MoE model: the MoE layers use torchtitan's DeepSeek-V3 sharding plan, written "
                    "for its MLA attention, not the GQA attention the suite's MoE presets have")
        for field in ("n_head", "n_kv_head"):
            heads = params.get(field) or params.get("n_head")
            if heads and int(heads) % par.tp:
                return f"parallel.tp={par.tp} does not divide model.{field}={heads}"
    return None


def available_installed(device_type: str) -> availability.Availability:
    """torchtitan's availability from the installed packages, without the import its class tries
    (`trainbench env` on a host with no accelerator: suite/backends/availability.py)."""
    missing = next((m for m in ("torchtitan", "triton") if importlib.util.find_spec(m) is None), None)
    if missing is not None:
        return availability.Availability(
            False, f"torchtitan is not importable (ModuleNotFoundError: No module named {missing!r}); install "
                   "`pip install 'trainbench-suite[torchtitan]'` (torchtitan 0.3.0 needs triton to import, also on CPU)")
    note = "" if device_type == "cuda" else (
        f"trains with attention: sdpa only ({NO_CPU_BACKWARD}); backends.torchtitan.attention: flex is refused here")
    return availability.Availability(True, note, package_version("torchtitan"))


def _one_of_k_and_v(spec: Any) -> bool:
    """LoRA targets with k or v but not both (the suite's names; pure: pydantic configs only)."""
    from suite.models.common.configs import LoraConfig

    params = dict(spec.model.params())
    if not params.get("lora"):
        return False
    try:
        targets = LoraConfig.model_validate(params["lora"]).suite_targets(bool(params.get("fused_qkv")))
    except ValueError:
        return False
    return ("wk" in targets) != ("wv" in targets)


def limit(spec: Any) -> Limit:
    """The kind of this engine's refusal of `spec` (suite/backends/limits.py `classify`)."""
    model_arch = arch(spec)
    if str(spec.task) == "grpo":
        return Limit("engine limit", "torchtitan 0.3.0's Trainer has no RL loop; its GRPO lives in "
                     "torchtitan.experiments.rl (GRPOLoss, DAPOLoss), whose rollouts run on vLLM "
                     "(experiments/rl/actors/generator.py: 'from vllm import EngineArgs, LLMEngine, SamplingParams'; "
                     "vLLM ships CUDA builds) in Monarch actors with torchstore weight sync (monarch, torchstore)")
    if model_arch == "gpt":
        return Limit("engine limit", "torchtitan 0.3.0 ships no GPT-2 (torchtitan.models: llama3, deepseek_v3, gpt_oss, "
                     "qwen3, qwen3_5, kimi_k2_7, flux), and each parallelize_<model> shards its own model classes by "
                     "their module names (apply_fsdp_to_decoder reads torchtitan's Decoder: tok_embeddings, layers, "
                     "norm, lm_head): no torchtitan model holds GPT-2's learned positions, LayerNorm and GELU MLP")
    if model_arch == "flux":
        return Limit("engine limit", "torchtitan 0.3.0's parallelize_flux (torchtitan.models.flux, what the MLPerf "
                     "flux1 reference trains with) applies FSDP2, full activation checkpointing, compile and context "
                     "parallel only (models/flux/sharding.py declares the DP and CP mesh axes alone): no tensor, pipeline or "
                     "expert parallel plan for Flux")
    if model_arch == "hf_llama":
        if _one_of_k_and_v(spec):
            return Limit("engine limit", "torchtitan 0.3.0's QKVLinear builds wk and wv from one Linear config ("
                         "`wkv`, torchtitan/models/common/attention.py) and its LoRAConverter "
                         "(torchtitan.components.lora) matches a config by its last name: it adapts both or neither")
        return Limit("not wired", "torchtitan 0.3.0 builds it: Llama3Model on the checkpoint's weights, the recipe's "
                     "adapters put in by torchtitan.components.lora.LoRAConverter (suite/backends/torchtitan/model.py); "
                     "the refusal names what this backend does not drive with adapters yet (tensor or pipeline "
                     "parallel, an MoE base) or RL on a Hugging Face checkpoint")
    if model_arch not in ("llama", "gpt"):
        return Limit("engine limit", "torchtitan 0.3.0's models are LLMs and Flux (torchtitan.models: llama3, "
                     "deepseek_v3, gpt_oss, qwen3, qwen3_5, kimi_k2_7, flux): no CNN, GNN, recommender or RL policy")
    return Limit("not wired", "torchtitan holds this model family; the refusal names the part of its trainer "
                 "(pipeline, context parallel, weight map) this backend does not drive yet")


def fsdp_mechanism(device_type: str) -> tuple[str, bool, bool, bool]:
    """What holds `parallel.fsdp` (suite/backends/translate.py): mechanism, parameters, gradients, optimizer sharded."""
    return ("torchtitan FSDP (data_parallel_shard_degree)", True, True, True)

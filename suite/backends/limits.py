"""Why a support-matrix cell says no: a limit of the engine itself, or a part of the engine TrainBench does not wire.

A backend's `supports()` gives the reason in its own words (the field to change); this module says which kind of
"no" it is, so that `list --matrix --why` and `--json` never present a gap of TrainBench's as the engine's limit.
Engine limits name what the engine ships (read from its installed package: megatron-core 0.16.1, torchtitan 0.3.0,
veRL 0.9.1, DeepSpeed 0.19.8) or its upstream issue; everything else is "not wired", naming the part of the engine
that would hold it. Pure: the spec is read, no framework is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

LM_ARCHS = ("gpt", "llama", "hf_llama")


@dataclass(frozen=True)
class Limit:
    kind: Literal["engine limit", "not wired"]
    why: str

    def describe(self) -> str:
        return f"{self.kind}: {self.why}"


def _arch(spec: Any) -> str:
    return str(spec.model.arch)


def _megatron(spec: Any) -> Limit:
    if _arch(spec) not in LM_ARCHS:
        return Limit("engine limit", "megatron-core builds language models only (megatron.core.models: gpt, bert, "
                     "T5, mamba, multimodal, mimo and the vision encoders multimodal LLMs use): no diffusion "
                     "transformer, CNN, GNN, recommender or RL policy network")
    return Limit("not wired", "Megatron-core's GPTModel and TransformerConfig hold Llama-class decoders; the "
                 "refusal names the feature this backend's weight map or layout does not carry over yet")


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


def _torchtitan(spec: Any) -> Limit:
    arch = _arch(spec)
    if str(spec.task) == "grpo":
        return Limit("engine limit", "torchtitan 0.3.0's Trainer has no RL loop; its GRPO lives in "
                     "torchtitan.experiments.rl (GRPOLoss, DAPOLoss), whose rollouts run on vLLM "
                     "(experiments/rl/actors/generator.py: 'from vllm import EngineArgs, LLMEngine, SamplingParams'; "
                     "vLLM ships CUDA builds) in Monarch actors with torchstore weight sync (monarch, torchstore)")
    if arch == "gpt":
        return Limit("engine limit", "torchtitan 0.3.0 ships no GPT-2 (torchtitan.models: llama3, deepseek_v3, gpt_oss, "
                     "qwen3, qwen3_5, kimi_k2_7, flux), and each parallelize_<model> shards its own model classes by "
                     "their module names (apply_fsdp_to_decoder reads torchtitan's Decoder: tok_embeddings, layers, "
                     "norm, lm_head): no torchtitan model holds GPT-2's learned positions, LayerNorm and GELU MLP")
    if arch == "flux":
        return Limit("engine limit", "torchtitan 0.3.0's parallelize_flux (torchtitan.models.flux, what the MLPerf "
                     "flux1 reference trains with) applies FSDP2, full activation checkpointing, compile and context "
                     "parallel only (models/flux/sharding.py declares the DP and CP mesh axes alone): no tensor, pipeline or "
                     "expert parallel plan for Flux")
    if arch == "hf_llama":
        if _one_of_k_and_v(spec):
            return Limit("engine limit", "torchtitan 0.3.0's QKVLinear builds wk and wv from one Linear config ("
                         "`wkv`, torchtitan/models/common/attention.py) and its LoRAConverter "
                         "(torchtitan.components.lora) matches a config by its last name: it adapts both or neither")
        return Limit("not wired", "torchtitan 0.3.0 builds it: Llama3Model on the checkpoint's weights, the recipe's "
                     "adapters put in by torchtitan.components.lora.LoRAConverter (suite/backends/torchtitan/model.py); "
                     "the refusal names what this backend does not drive with adapters yet (tensor or pipeline "
                     "parallel, an MoE base) or RL on a Hugging Face checkpoint")
    if arch not in ("llama", "gpt"):
        return Limit("engine limit", "torchtitan 0.3.0's models are LLMs and Flux (torchtitan.models: llama3, "
                     "deepseek_v3, gpt_oss, qwen3, qwen3_5, kimi_k2_7, flux): no CNN, GNN, recommender or RL policy")
    return Limit("not wired", "torchtitan holds this model family; the refusal names the part of its trainer "
                 "(pipeline, context parallel, weight map) this backend does not drive yet")


def _verl(spec: Any) -> Limit:
    task = str(spec.task)
    if task == "causal_lm_samples":
        return Limit("not wired", "veRL 0.9.1's SFT trainer (verl.trainer.sft_trainer, LoRA included) would hold "
                     "it; this backend drives veRL's GRPO trainer only (the SFT trainer's config defaults to "
                     "trainer.device: cuda, and its platform layer names cpu and gloo: whether it trains on a CPU is "
                     "untried)")
    if task == "agentic_grpo":
        return Limit("engine limit", "veRL trains on CUDA only (verl-project/verl#3266: 'Total available GPUs 0'), and "
                     "its agent loop (verl.experimental.agent_loop) 'chat[s] with OpenAI compatible LLM server' "
                     "(verl.workers.rollout.llm_server: vLLM or SGLang, CUDA builds); this backend drives veRL's "
                     "single-turn GRPO, the agent loop is not wired either")
    if task == "grpo":
        return Limit("engine limit", "veRL trains on CUDA only (verl-project/verl#3266: 'Total available GPUs 0')")
    return Limit("engine limit", "veRL is a post-training framework (PPO/GRPO and SFT trainers over Hugging Face "
                 "language models): no pretraining loop and no vision, graph, recommender or gym-policy training")


def _deepspeed(spec: Any) -> Limit:
    par = spec.parallel
    if par is not None and par.pp > 1:
        return Limit("engine limit", "DeepSpeed's pipeline engine takes the model as a deepspeed.pipe.PipelineModule "
                     "and drives its own data iterator and loss (engine.train_batch), and refuses ZeRO-2/3 under "
                     "pipeline parallelism (deepspeed/runtime/pipe/engine.py)")
    return Limit("not wired", "DeepSpeed holds it (AutoTP, DeepSpeed-MoE's deepspeed.moe.layer.MoE, MiCS); this "
                 "backend wires ZeRO data parallelism and activation checkpointing")


def classify(backend: str, spec: Any) -> Limit:
    """The kind of a refusal of `backend` for `spec` (call it only for a refused cell)."""
    if backend == "megatron":
        return _megatron(spec)
    if backend == "torchtitan":
        return _torchtitan(spec)
    if backend == "verl":
        return _verl(spec)
    if backend == "deepspeed":
        return _deepspeed(spec)
    return Limit("not wired", f"the {backend} backend is TrainBench's own: what it refuses is not implemented here")

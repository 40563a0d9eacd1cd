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
        return Limit("not wired", "torchtitan 0.3.0 has Llama 3 models, Hugging Face checkpoint adapters and LoRA "
                     "(torchtitan.components.lora.LoRAConverter: target_modules ['wqkv', 'wo'] puts one adapter on "
                     "its fused QKV linear, the recipe's qkv_proj); this backend builds from the suite's `llama` "
                     "configs only and does not run the converter")
    if arch not in ("llama", "gpt"):
        return Limit("engine limit", "torchtitan 0.3.0's models are LLMs and Flux (torchtitan.models: llama3, "
                     "deepseek_v3, gpt_oss, qwen3, qwen3_5, kimi_k2_7, flux): no CNN, GNN, recommender or RL policy")
    return Limit("not wired", "torchtitan holds this model family; the refusal names the part of its trainer "
                 "(pipeline, context parallel, weight map) this backend does not drive yet")


def _verl(spec: Any) -> Limit:
    task = str(spec.task)
    if task == "causal_lm_samples":
        if _arch(spec) != "hf_llama" or getattr(spec.model, "lora", None) is None:
            return Limit("not wired", "veRL 0.9.1's SFT trainer (verl.trainer.sft_trainer) fine-tunes Hugging Face "
                         "models in full too; this backend wires it for LoRA fine-tunes of Llama checkpoints")
        return Limit("engine limit", "veRL 0.9.1's SFT trainer (verl.trainer.sft_trainer, LoRA by peft; this backend "
                     "launches it on a CUDA node: suite/backends/verl/sft_launch.py) trains on CUDA or Ascend NPU "
                     "only: it ships no CPU platform (verl.plugin.platform registers nvidia, huawei, amd; a CPU host "
                     "falls back to nvidia, and verl/utils/distributed.py:63 asks torch for 'cpu:gloo,cuda:nccl': "
                     "\"Distributed package doesn't have NCCL built in\"; with a CPU platform it asks for "
                     "'cpu:gloo,cpu:gloo', which torch refuses), its FSDP engine registers for cuda and npu only "
                     "(workers/engine/fsdp/transformer_impl.py:1143), auto_set_device keeps trainer.device: cuda on a "
                     "CPU platform (verl/utils/device.py:151), and it calls torch.cuda's memory and device-name "
                     "functions on its device module. Given those by a test-only shim (tests/support/verl_cpu_sft.py) "
                     "it trains the tiny variant on a CPU from this backend's own files and overrides "
                     "(tests/backends/test_verl_sft_run.py). Of the recipe, its FSDP LoRA cannot carry the LoRA "
                     "dropout nor ONE adapter on the fused qkv_proj (sft.unexpressed, recorded in the run's config)")
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

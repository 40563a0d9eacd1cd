"""Where veRL's trainer can start (`supports`, `missing_modules`), read from the spec and the installed packages
alone: no torch where the host shows no GPU, no veRL, so `trainbench list --json` answers at once.
suite/backends/verl/backend.py re-exports these."""

from __future__ import annotations

import importlib.util
from typing import Any

from suite.backends.availability import Availability
from suite.backends.limits import Limit, arch
from suite.measure.fingerprint import package_version

ISSUE = "veRL cannot train on CPU (verl-project/verl#3266: \"Total available GPUs 0\")"
INSTALL = "pip install 'verl[vllm]==0.9.1' (veRL's trainer, its verl-core modules and the vLLM rollout)"
# imported by veRL 0.9.1's trainer (verl.trainer.ppo.ray_trainer and its rollout server) but not declared by the
# plain `verl` wheel, and the rollout engine the translation names (actor_rollout_ref.rollout.name=vllm)
TRAINER_MODULES = ("vllm", "cachetools", "fastapi", "uvicorn")
# imported by veRL 0.9.1's SFT trainer (sft_trainer -> workers.engine_workers -> checkpoint_engine.base ->
# workers/rollout/utils.py:20-22) but not declared by the plain wheel; it rolls nothing out (no vllm)
SFT_TRAINER_MODULES = ("fastapi", "uvicorn")
SFT_CPU = ("veRL's SFT trainer trains on CUDA (or Ascend NPU) only: it ships no CPU platform "
           "(verl.plugin.platform: nvidia, huawei, amd), asks torch for 'cpu:gloo,cuda:nccl' "
           "(verl/utils/distributed.py:63) and registers its FSDP engine for cuda and npu only "
           "(workers/engine/fsdp/transformer_impl.py:1143)")


def _cuda_count() -> int:
    """CUDA devices torch sees; 0 without importing torch where the host shows no GPU (suite/devices.py)."""
    from suite import devices

    if not devices.accelerator_evidence():
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def missing_modules(modules: tuple[str, ...] | None = None) -> list[str]:
    """What veRL's trainer (GRPO's: TRAINER_MODULES, or `modules`) would fail to import here (found without
    importing anything)."""
    if importlib.util.find_spec("verl") is None:
        return ["verl"]
    return [m for m in (TRAINER_MODULES if modules is None else modules) if importlib.util.find_spec(m) is None]


def _not_ready(modules: tuple[str, ...] | None = None, issue: str = ISSUE) -> str | None:
    if _cuda_count() == 0:
        also = "" if importlib.util.find_spec("verl") else f"; and veRL is not installed ({INSTALL})"
        return f"{issue}; run it on a CUDA node{also}"
    if missing := missing_modules(modules):
        return f"veRL's trainer cannot start here: {', '.join(missing)} not installed ({INSTALL})"
    return None


def sft_refusal(spec: Any) -> str | None:
    """What of a `causal_lm_samples` spec veRL's SFT trainer is not wired for here (suite/backends/verl/sft.py)."""
    if str(spec.model.arch) != "hf_llama" or spec.model.lora is None:
        return ("this backend runs veRL's SFT trainer for LoRA fine-tunes of Hugging Face Llama checkpoints "
                f"(model.arch hf_llama with model.lora), not model.arch {spec.model.arch!r}"
                f"{'' if spec.model.lora is not None else ' without model.lora'}")
    return None


def supports(spec: Any) -> str | None:
    if spec.task == "causal_lm_samples":
        return sft_refusal(spec) or _not_ready(SFT_TRAINER_MODULES, SFT_CPU)
    if spec.task != "grpo":
        return ("this backend runs veRL's GRPO trainer (task grpo) and its SFT trainer (task causal_lm_samples "
                f"with model.lora), not task {spec.task!r}")
    return _not_ready()


def limit(spec: Any) -> Limit:
    """The kind of this engine's refusal of `spec` (suite/backends/limits.py `classify`)."""
    task = str(spec.task)
    if task == "causal_lm_samples":
        if arch(spec) != "hf_llama" or getattr(spec.model, "lora", None) is None:
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


def available_installed(device_type: str) -> Availability:
    from suite.backends.verl.options import _not_ready

    reason = _not_ready()
    return Availability(reason is None, reason or "", package_version("verl"))

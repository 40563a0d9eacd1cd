"""Where veRL's trainer can start (`supports`, `missing_modules`), read from the spec and the installed packages
alone: no torch where the host shows no GPU, no veRL, so `trainbench list --json` answers at once.
suite/backends/verl/backend.py re-exports these."""

from __future__ import annotations

import importlib.util
from typing import Any

from suite.backends.availability import Availability
from suite.backends.limits import Limit
from suite.measure.fingerprint import package_version

ISSUE = "veRL cannot train on CPU (verl-project/verl#3266: \"Total available GPUs 0\")"
INSTALL = "pip install 'verl[vllm]==0.9.1' (veRL's trainer, its verl-core modules and the vLLM rollout)"
# imported by veRL 0.9.1's trainer (verl.trainer.ppo.ray_trainer and its rollout server) but not declared by the
# plain `verl` wheel, and the rollout engine the translation names (actor_rollout_ref.rollout.name=vllm)
TRAINER_MODULES = ("vllm", "cachetools", "fastapi", "uvicorn")


def _cuda_count() -> int:
    """CUDA devices torch sees; 0 without importing torch where the host shows no GPU (suite/devices.py)."""
    from suite import devices

    if not devices.accelerator_evidence():
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def missing_modules() -> list[str]:
    """What veRL's trainer would fail to import here (found without importing anything)."""
    if importlib.util.find_spec("verl") is None:
        return ["verl"]
    return [m for m in TRAINER_MODULES if importlib.util.find_spec(m) is None]


def _not_ready() -> str | None:
    if _cuda_count() == 0:
        also = "" if importlib.util.find_spec("verl") else f"; and veRL is not installed ({INSTALL})"
        return f"{ISSUE}; run it on a CUDA node{also}"
    if missing := missing_modules():
        return f"veRL's trainer cannot start here: {', '.join(missing)} not installed ({INSTALL})"
    return None


def supports(spec: Any) -> str | None:
    if spec.task != "grpo":
        return f"this backend runs veRL's GRPO trainer only (task grpo), not task {spec.task!r}"
    return _not_ready()


def limit(spec: Any) -> Limit:
    """The kind of this engine's refusal of `spec` (suite/backends/limits.py `classify`)."""
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


def available_installed(device_type: str) -> Availability:
    from suite.backends.verl.options import _not_ready

    reason = _not_ready()
    return Availability(reason is None, reason or "", package_version("verl"))

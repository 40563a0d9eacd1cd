"""veRL (verl-project/verl 0.9.1) as a backend for `task: grpo`: the spec becomes veRL's GRPO trainer config
(suite/backends/verl/adapt.py: overrides validated by veRL's own config code, parquet data in its layout, the
suite's reward plug-in as its custom reward function, its metrics log read back into the Result's phases), and on a
CUDA node the harness runs veRL's own trainer, `python -m verl.trainer.main_ppo`, as the run's child on its clock
(suite/backends/verl/launch.py): veRL runs its own loop (Ray workers, a vLLM rollout), so `own_trainer` hands the
harness that loop instead of `train_step`.

veRL trains on GPUs only: without one it stops with "Total available GPUs 0" (verl-project/verl#3266), so here
`supports` refuses every spec on a machine without CUDA and `available` says why. Its trainer also needs what the
plain `verl` wheel does not bring: a rollout engine (veRL 0.9.1's trainer registers vllm, sglang and trtllm only:
no Hugging Face rollout) and the modules its trainer imports from the `verl-core` extra; a node without them is
refused before the clock, naming what to install.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from suite.backends.base import Availability, Backend, RunOptions, StepOut, TrainState
from suite.measure.environment import package_version
from suite.workloads.contract import Batch, Workload

ISSUE = "veRL cannot train on CPU (verl-project/verl#3266: \"Total available GPUs 0\")"
INSTALL = "pip install 'verl[vllm]==0.9.1' (veRL's trainer, its verl-core modules and the vLLM rollout)"
# imported by veRL 0.9.1's trainer (verl.trainer.ppo.ray_trainer and its rollout server) but not declared by the
# plain `verl` wheel, and the rollout engine the translation names (actor_rollout_ref.rollout.name=vllm)
TRAINER_MODULES = ("vllm", "cachetools", "fastapi", "uvicorn")


def _cuda_count() -> int:
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


class VerlBackend(Backend):
    name: ClassVar[str] = "verl"
    supports = staticmethod(supports)

    def __init__(self, device: Any) -> None:
        super().__init__(device)
        self.follow: Any = None
        self.folder: Path | None = None

    def available(self) -> Availability:
        version = package_version("verl")
        reason = _not_ready()
        return Availability(reason is None, reason or "", version)

    def setup(self, workload: Workload, opts: RunOptions) -> TrainState:
        """Untimed init: the warm-started policy as a model folder, the data, the command line veRL checked."""
        from suite.backends.verl import launch as verl_launch

        policy = workload.build_model()
        self.folder = Path(tempfile.mkdtemp(prefix="trainbench-verl-"))
        spec = workload.spec  # type: ignore[attr-defined]
        prepared = verl_launch.prepare(spec, workload, policy, self.folder, gpus=_cuda_count(),
                                       seed=workload.ctx.seed)  # type: ignore[attr-defined]
        self.follow = verl_launch.Follow(prepared)
        return TrainState(model=policy, raw_model=policy, extra={"verl": prepared})

    def own_trainer(self, state: TrainState) -> Any:
        return self.follow

    def train_step(self, state: TrainState, batch: Batch) -> StepOut:
        raise RuntimeError("backend 'verl' has no harness step: veRL's trainer runs the loop (own_trainer)")

    def eval_model(self, state: TrainState) -> nn.Module:
        return state.raw_model  # the warm start veRL starts from; veRL's trainer holds the model it trains

    def synchronize(self) -> None:
        pass

    def parallel_layout(self) -> dict[str, Any]:
        return {"dp": max(_cuda_count(), 1), "framework": "verl"}

    def close(self) -> None:
        if self.follow is not None:
            self.follow.stop()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

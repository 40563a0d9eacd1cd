"""veRL (verl-project/verl 0.9.1) as a backend for `task: grpo`: the spec becomes veRL's GRPO trainer config
(suite/backends/verl_adapt.py: overrides validated by veRL's own config code, parquet data in its layout, the
suite's reward plug-in as its custom reward function, its metrics log read back into the Result's phases).

veRL trains on GPUs only: without one it stops with "Total available GPUs 0" (verl-project/verl#3266), so here
`supports` refuses every spec on a machine without CUDA and `available` says why. veRL runs its own trainer loop
(Ray workers, vLLM rollout), which the harness's per-step loop cannot drive: on a GPU node the recipe is launched
by `verl_adapt.hydra_args` + `python -m verl.trainer.main_ppo` (benchmarks/device_check.py), not by `setup`.
"""

from __future__ import annotations

import importlib.util
from typing import Any, ClassVar

from torch import nn

from suite.backends.base import Availability, Backend, RunOptions, StepOut, TrainState
from suite.measure.environment import package_version
from suite.workloads.contract import Batch, Workload

ISSUE = "veRL cannot train on CPU (verl-project/verl#3266: \"Total available GPUs 0\")"


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def supports(spec: Any) -> str | None:
    if spec.task != "grpo":
        return f"veRL runs RL post-training only (task grpo), not task {spec.task!r}"
    if _cuda_count() == 0:
        return f"{ISSUE}; run it on a CUDA node"
    return None


class VerlBackend(Backend):
    name: ClassVar[str] = "verl"
    supports = staticmethod(supports)

    def available(self) -> Availability:
        version = package_version("verl")
        no_gpu = self.device.type != "cuda" or _cuda_count() == 0
        if importlib.util.find_spec("verl") is None:
            return Availability(False, "veRL is not installed (pip install verl==0.9.1; its dependencies must not "
                                       "move the installed torch)" + (f"; and {ISSUE}" if no_gpu else ""), None)
        if no_gpu:
            return Availability(False, ISSUE, version)
        return Availability(False, "veRL runs its own trainer (python -m verl.trainer.main_ppo with the overrides "
                                   "of suite.backends.verl_adapt), not the harness's step loop", version)

    def setup(self, workload: Workload, opts: RunOptions) -> TrainState:
        raise RuntimeError(f"backend 'verl' is not available here: {self.available().reason}")

    def train_step(self, state: TrainState, batch: Batch) -> StepOut:
        raise RuntimeError("backend 'verl' has no harness step: veRL's trainer runs the loop")

    def eval_model(self, state: TrainState) -> nn.Module:
        raise RuntimeError("backend 'verl' has no harness model: veRL's trainer holds it")

    def synchronize(self) -> None:
        pass

    def parallel_layout(self) -> dict[str, Any]:
        return {"dp": 1, "framework": "verl"}

    def close(self) -> None:
        pass

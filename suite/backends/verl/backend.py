"""veRL (verl-project/verl 0.9.1) as a backend for `task: grpo` and for LoRA fine-tunes (`task: causal_lm_samples`
with `model.lora`: MLPerf's llama2_70b_lora, run by veRL's SFT trainer, suite/backends/verl/sft_launch.py). GRPO: the spec becomes veRL's GRPO trainer config
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

import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from suite.backends.availability import Availability
from suite.backends.base import Backend, RunOptions, StepOut, TrainState
from suite.backends.verl.options import (
    _cuda_count,
    available_installed,
    supports,
)
from suite.workloads.contract import Batch, Workload


class VerlBackend(Backend):
    name: ClassVar[str] = "verl"
    supports = staticmethod(supports)

    def __init__(self, device: Any) -> None:
        super().__init__(device)
        self.follow: Any = None
        self.folder: Path | None = None

    def available(self) -> Availability:
        return available_installed(self.device.type)

    def setup(self, workload: Workload, opts: RunOptions) -> TrainState:
        """Untimed init: the warm-started policy (or the LoRA base) as a model folder, the data, the command line
        veRL checked."""
        from suite.backends.verl import launch as verl_launch

        policy = workload.build_model()
        self.folder = Path(tempfile.mkdtemp(prefix="trainbench-verl-"))
        spec = workload.spec  # type: ignore[attr-defined]
        if spec.task == "causal_lm_samples":
            from suite.backends.verl import sft_launch

            prepared = sft_launch.prepare(spec, workload, policy, self.folder, gpus=_cuda_count(),
                                          seed=workload.ctx.seed)  # type: ignore[attr-defined]
            self.follow = sft_launch.Follow(prepared)
            return TrainState(model=policy, raw_model=policy, extra={"verl": prepared})
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

"""Where GRPO's completions are generated: `colocated` (the trainer's own model, as veRL's hybrid engine) or `ray`
(rollout workers as Ray actors beside the trainer, each with its own copy of the policy, the trainer's weights
broadcast to them before every rollout: the `weight_sync` phase).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch
from torch import nn

from suite.models.common.generation import Generated, Sampling, generate


def require_ray() -> None:
    """Before the clock: a Ray placement where Ray is not installed is refused with what to do."""
    if importlib.util.find_spec("ray") is None:
        raise ValueError("grpo.placement: ray needs Ray, which is not installed here: pip install 'ray>=2.41' "
                         "(or set grpo.placement: colocated)")


def merge(parts: list[Generated]) -> Generated:
    width = max(p.completion.shape[1] for p in parts)

    def pad(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[1]))

    return Generated(torch.cat([p.prompts for p in parts]), torch.cat([pad(p.completion) for p in parts]),
                     torch.cat([pad(p.logprobs) for p in parts]), torch.cat([pad(p.mask) for p in parts]),
                     max(p.steps for p in parts), sum(p.attended for p in parts))


class Colocated:
    """One process generates and trains: nothing to synchronise."""

    name = "colocated"

    def __init__(self, model: nn.Module, pad_id: int):
        self.model, self.pad_id = model, pad_id

    def sync(self, model: nn.Module) -> bool:
        self.model = model
        return False

    def generate(self, prompts: torch.Tensor, s: Sampling, seed: int, group_size: int = 1,
                 prompt_mask: torch.Tensor | None = None) -> Generated:
        gen = torch.Generator(device=prompts.device).manual_seed(seed)
        return generate(self.model, prompts, s, gen, pad_id=self.pad_id, prompt_mask=prompt_mask)

    def close(self) -> None:
        pass


class _Worker:
    """A rollout actor: a CPU copy of the policy that loads the trainer's weights and samples from them."""

    def __init__(self, arch: str, model_cfg: dict[str, Any], meta: dict[str, Any], pad_id: int, threads: int):
        from suite import registry

        torch.set_num_threads(threads)
        component = registry.model_component(arch)
        self.model = component.build(component.Config.model_validate(model_cfg), meta)
        self.model.eval()
        self.pad_id = pad_id

    def load(self, state: dict[str, torch.Tensor]) -> bool:
        self.model.load_state_dict(state)
        return True

    def generate(self, prompts: torch.Tensor, sampling: dict[str, Any], seed: int,
                 prompt_mask: torch.Tensor | None = None) -> Generated:
        gen = torch.Generator().manual_seed(seed)
        return generate(self.model, prompts, Sampling(**sampling), gen, pad_id=self.pad_id, prompt_mask=prompt_mask)


class RayRollout:
    """n rollout actors; prompts are split between them in whole groups (each actor gets consecutive prompts)."""

    name = "ray"

    def __init__(self, arch: str, model_cfg: dict[str, Any], meta: dict[str, Any], pad_id: int, workers: int):
        require_ray()
        import ray

        if not ray.is_initialized():
            cpus = max(2, workers + 1)
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False,
                     runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", ""),
                                               "OMP_NUM_THREADS": "1"}})
            self._started = True
        else:
            self._started = False
        actor = ray.remote(num_cpus=1)(_Worker)
        self.workers: list[Any] = [actor.remote(arch, model_cfg, meta, pad_id, 1) for _ in range(workers)]
        self.ray = ray

    def sync(self, model: nn.Module) -> bool:
        """Broadcast the trainer's weights (one object in Ray's store, read by every actor); True when done."""
        state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        ref = self.ray.put(state)
        self.ray.get([w.load.remote(ref) for w in self.workers])
        return True

    def generate(self, prompts: torch.Tensor, s: Sampling, seed: int, group_size: int = 1,
                 prompt_mask: torch.Tensor | None = None) -> Generated:
        groups = prompts.shape[0] // group_size
        n = min(len(self.workers), groups)
        per = -(-groups // n) * group_size
        chunks = [prompts[i : i + per].cpu() for i in range(0, prompts.shape[0], per)]
        masks = ([None] * len(chunks) if prompt_mask is None
                 else [prompt_mask[i : i + per].cpu() for i in range(0, prompts.shape[0], per)])
        futures = [w.generate.remote(c, s.model_dump(), seed * 1000 + i, m)
                   for i, (w, c, m) in enumerate(zip(self.workers, chunks, masks, strict=False))]
        out = merge(self.ray.get(futures))
        device = prompts.device
        return Generated(out.prompts.to(device), out.completion.to(device), out.logprobs.to(device),
                         out.mask.to(device), out.steps, out.attended)

    def close(self) -> None:
        for w in self.workers:
            try:
                self.ray.kill(w)
            except Exception:  # noqa: BLE001 - an actor that is gone already
                pass
        if self._started:
            self.ray.shutdown()

"""Task agentic_grpo's `placement: ray`: the multi-turn episodes (generation, sandboxed tools, rewards) and the old
log-probs run in Ray actors beside the trainer, each with its own copy of the policy, the environment and the task
data; the trainer's weights go to them through Ray's object store before each rollout (`weight_sync`). A rollout's
tasks are split between the actors in whole groups; actor i samples with the rollout's seed and i, so one actor
gives the very batch the colocated placement gives. With `rollout_mode: async` the trainer updates while the actors
generate (staleness 1), as NeMo-RL's generation pool does beside its training pool.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
import torch.nn.functional as F

from suite.models.common.generation import Sampling, token_logprobs
from suite.workloads.agentic.env import Rollout, rollout


class _Worker:
    """A rollout actor: the policy, the task data's tokenizer and the environment's limits."""

    def __init__(self, arch: str, model_cfg: dict[str, Any], meta: dict[str, Any], data: str,
                 data_cfg: dict[str, Any], sampling: dict[str, Any]) -> None:
        from suite import registry

        torch.set_num_threads(1)
        component = registry.model_component(arch)
        self.model = component.build(component.Config.model_validate(model_cfg), meta).eval()
        reader = registry.data_component(data)
        self.repos = reader.load(reader.Config.model_validate(data_cfg))
        self.sampling = Sampling(**sampling)

    def load(self, state: dict[str, torch.Tensor]) -> bool:
        self.model.load_state_dict(state)
        return True

    def run(self, tasks: list[Any], g: int, seed: int, max_turns: int, context: int, tool_workers: int,
            limits: Any) -> tuple[Rollout, torch.Tensor, float]:
        from suite.workloads.agentic.bugfix import BugFixEnv

        envs = [BugFixEnv(t, limits) for t in tasks for _ in range(g)]
        ro = rollout(self.model, envs, self.repos, self.sampling, torch.Generator().manual_seed(seed), max_turns,
                     context, tool_workers)
        t = time.perf_counter()
        with torch.no_grad():
            old = token_logprobs(self.model, ro.sequences, ro.prompt_len, self.sampling.temperature, ro.prompt_mask)
        return ro, old, time.perf_counter() - t


def _merge(parts: list[tuple[Rollout, torch.Tensor, float]], pad: int) -> tuple[Rollout, torch.Tensor, float]:
    """The actors' rollouts as one batch, in task order: prompts left-padded, turns right-padded to the widest;
    the phases' seconds are the slowest actor's (they ran at once)."""
    p = max(r.prompt_len for r, _, _ in parts)
    t = max(r.mask.shape[1] for r, _, _ in parts)

    def widen(r: Rollout, old: torch.Tensor) -> tuple[torch.Tensor, ...]:
        lp, rp = p - r.prompt_len, t - r.mask.shape[1]
        seq = F.pad(F.pad(r.sequences, (lp, 0), value=pad), (0, rp), value=pad)
        return (seq, F.pad(r.prompt_mask, (lp, 0), value=False), F.pad(r.mask, (0, rp)), F.pad(r.logprobs, (0, rp)),
                F.pad(old, (0, rp)))

    cols = list(zip(*(widen(r, o) for r, o, _ in parts), strict=True))
    rs = [r for r, _, _ in parts]
    out = Rollout(torch.cat(cols[0]), torch.cat(cols[1]), torch.cat(cols[2]), torch.cat(cols[3]),
                  torch.cat([r.rewards for r in rs]), [tr for r in rs for tr in r.trajectories],
                  max(r.gen_s for r in rs), max(r.tool_s for r in rs), max(r.reward_s for r in rs),
                  sum(r.gen_tokens for r in rs), sum(r.forward_positions for r in rs))
    return out, torch.cat(cols[4]), max(s for _, _, s in parts)


class RayAgentic:
    """n rollout actors (grpo.rollout_workers) on a local Ray cluster started here, or the one already running."""

    def __init__(self, arch: str, model_cfg: dict[str, Any], meta: dict[str, Any], data: str,
                 data_cfg: dict[str, Any], sampling: Sampling, workers: int, pad_id: int) -> None:
        import ray

        self._started = not ray.is_initialized()
        if self._started:
            ray.init(num_cpus=max(2, workers + 1), include_dashboard=False, log_to_driver=False,
                     configure_logging=False, runtime_env={"env_vars": {
                         "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}})
        actor = ray.remote(num_cpus=1)(_Worker)
        self.workers: list[Any] = [actor.remote(arch, model_cfg, meta, data, data_cfg, sampling.model_dump())
                                   for _ in range(workers)]
        self.ray, self.pad_id = ray, pad_id

    def sync(self, state: dict[str, torch.Tensor]) -> None:
        ref = self.ray.put(state)
        self.ray.get([w.load.remote(ref) for w in self.workers])

    def run(self, tasks: list[Any], g: int, seed: int, max_turns: int, context: int, tool_workers: int,
            limits: Any) -> tuple[Rollout, torch.Tensor, float]:
        n = min(len(self.workers), len(tasks))
        per = -(-len(tasks) // n)
        chunks = [tasks[i : i + per] for i in range(0, len(tasks), per)]
        futures = [w.run.remote(c, g, seed if i == 0 else seed * 1009 + i, max_turns, context, tool_workers, limits)
                   for i, (w, c) in enumerate(zip(self.workers, chunks, strict=False))]
        return _merge(self.ray.get(futures), self.pad_id)

    def close(self) -> None:
        for w in self.workers:
            try:
                self.ray.kill(w)
            except Exception:  # noqa: BLE001 - an actor that is gone already
                pass
        if self._started:
            self.ray.shutdown()

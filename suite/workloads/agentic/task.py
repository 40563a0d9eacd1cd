"""Task agentic_grpo: GRPO over multi-turn, tool-using episodes (suite/workloads/agentic/env.py) whose tools run
in a sandbox, with synchronous or asynchronous rollouts (suite/algorithms/grpo_agentic.py).

Init (untimed): the policy is warm-started by supervised steps on expert episodes (the loss on the expert's action
tokens only, the tool outputs masked as in the update), the same model for every run seed. On the clock each
rollout draws `data.batch_size` tasks (seeded by the run seed and the rollout's index, so the order of threads
cannot change them), runs G episodes of each, scores them with the environment's reward (the tests), normalises
within each group and recomputes the old log-probs with the weights that generated; each harness step is one
clipped update with the tool-output tokens masked out. Evaluation: pass@k and pass@1 of k sampled attempts on the
held-out tasks (and the mean turns). Phases: weight_sync, gen, tool, reward, old_log_prob, update, wait (the
trainer idle for a rollout), plus the overlap of generation with the update (async).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from suite.algorithms import grpo_agentic, grpo_loss
from suite.models.common.generation import Sampling, token_logprobs
from suite.workloads.agentic.bugfix import BugFixEnv
from suite.workloads.agentic.env import rollout
from suite.workloads.agentic.sandbox import Limits, enforced
from suite.workloads.base import WorkloadBase
from suite.workloads.checks import AgenticGRPOChecks
from suite.workloads.contract import Batch, Context
from suite.workloads.grpo_rollout import require_ray
from suite.workloads.ppo import _unwrap

PHASES = ("weight_sync", "gen", "tool", "reward", "old_log_prob", "update", "wait")


class AgenticClock:
    def __init__(self, updates_per_rollout: int = 1) -> None:
        self.updates_per_rollout = updates_per_rollout
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.rollout_spans: list[tuple[float, float]] = []
        self.update_spans: list[tuple[float, float]] = []
        self.rollouts = self.updates = 0
        self.versions: list[int] = []  # per rollout, in order: the updates its weights had seen
        self.tokens_generated = self.tokens_tool = self.turns = self.episodes = 0
        self.ends: dict[str, int] = {}
        self.reasons: dict[str, int] = {}
        self.lock = threading.Lock()

    def add(self, name: str, seconds: float) -> None:
        with self.lock:
            self.seconds[name] += seconds

    def overlap_s(self) -> float:
        total = 0.0
        for a0, a1 in self.rollout_spans:
            for b0, b1 in self.update_spans:
                total += max(0.0, min(a1, b1) - max(a0, b0))
        return total

    def report(self) -> dict[str, Any]:
        s, over = dict(self.seconds), self.overlap_s()
        rollout_busy = sum(b - a for a, b in self.rollout_spans)
        per = max(self.rollouts, 1)
        return {"seconds": s, "rollouts": self.rollouts, "updates": self.updates,
                "rollout_s_per_step": (s["gen"] + s["tool"] + s["reward"]) / per,
                "training_s_per_step": s["old_log_prob"] / per
                + s["update"] / max(self.updates, 1) * self.updates_per_rollout,
                "weight_sync_s_per_step": s["weight_sync"] / per,
                "max_staleness": max((i - v for i, v in enumerate(self.versions)), default=0),
                "updates_per_rollout": self.updates_per_rollout,
                "overlap_s": over, "overlap_fraction": over / rollout_busy if rollout_busy else 0.0,
                "tokens_generated": self.tokens_generated, "tokens_tool": self.tokens_tool,
                "episodes": self.episodes, "mean_turns": self.turns / max(self.episodes, 1),
                "episode_ends": dict(self.ends), "tool_reasons": dict(self.reasons)}


def mllog_keys(spec: Any) -> dict[str, Any]:
    """The GRPO keys of MLPerf Training 6.1's closed_qwen35_397b_grpo.yaml, from the spec alone (what a run logs,
    and what the full recipe's settings give without its data): the global batch counts completions (prompts x
    G), the validation temperature is the one evaluation samples with (data.eval_temperature), the maximum
    sequence is the context (model.seq_len)."""
    cfg = grpo_agentic.Config.model_validate(getattr(spec, "grpo", None) or {})
    opt, sched, data = spec.optimizer.params(), spec.schedule, spec.data
    betas = opt.get("betas", (0.9, 0.999))
    prompts = spec.data.batch_size
    return {"global_batch_size": prompts * cfg.group_size, "num_prompts_per_step": prompts,
            "num_generations_per_prompt": cfg.group_size,
            "generation_training_rollout_temperature": cfg.rollout.temperature,
            "generation_training_rollout_top_p": cfg.rollout.top_p,
            "generation_validation_rollout_temperature": float(getattr(data, "eval_temperature", 1.0)),
            "generation_validation_rollout_top_p": cfg.eval_sampling.top_p,
            "max_sequence_length": int(spec.model.params()["seq_len"]),
            "init_checkpoint_step": 0, "max_steps": spec.budget.max_steps or 0,
            "opt_adamw_beta_1": float(betas[0]), "opt_adamw_beta_2": float(betas[1]),
            "opt_adamw_epsilon": float(opt.get("eps", 1e-8)),
            "opt_adamw_weight_decay": float(opt.get("weight_decay", 0.0)),
            "opt_gradient_clip_norm": float(spec.backends.get("torch", {}).get("grad_clip") or 0.0),
            "opt_learning_rate_warmup_steps": int(getattr(sched, "warmup_steps", 0) or 0),
            "opt_learning_rate_decay_schedule": getattr(sched, "name", None) or "constant"}


class AgenticGRPO(AgenticGRPOChecks, WorkloadBase):
    def __init__(self, spec, ctx: Context):
        super().__init__(spec, ctx)
        self.cfg = grpo_agentic.Config.model_validate(getattr(spec, "grpo", None) or {})
        self.repos: Any = self.data_component.load(self.data_cfg)
        self.meta = self.repos.meta()
        dc = self.repos.cfg
        self.limits = Limits(wall_s=dc.wall_s, cpu_s=dc.cpu_s)
        stops = list(self.repos.stop_ids)
        self.sampling = Sampling(**{**self.cfg.rollout.model_dump(), "stop_tokens": stops})
        self.eval_sampling = Sampling(**{**self.cfg.eval_sampling.model_dump(), "stop_tokens": stops,
                                         "temperature": dc.eval_temperature})
        self.context = int(self.model_cfg.seq_len)
        need = len(self.repos.expert_ids(self.repos.held_out[0])[0])
        if need > self.context:
            raise ValueError(f"an expert episode is {need} tokens, longer than model.seq_len {self.context}")
        if self.cfg.kl_coef:
            raise ValueError("task agentic_grpo: kl_coef > 0 is not implemented (set grpo.kl_coef: 0)")
        self.clock = AgenticClock(self.cfg.ppo_epochs * self.cfg.minibatches)
        self.policy: nn.Module | None = None
        self.actor: nn.Module | None = None
        self.remote: Any = None  # placement ray: the rollout actors (suite/workloads/agentic/ray_rollout.py)
        if self.cfg.placement == "ray":
            require_ray()
        self._eval_s = 0.0

    # ---- init (untimed) ---------------------------------------------------------------------------------

    def build_model(self) -> nn.Module:
        ws = self.cfg.warm_start
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ws.seed)
            model = self.model_component.build(self.model_cfg, self.meta).to(self.device)
            if ws.checkpoint is not None:
                model.load_state_dict(torch.load(ws.checkpoint, map_location=self.device, weights_only=True))
            if ws.sft_steps:
                self._sft(model)
        return model

    def _sft(self, model: nn.Module) -> None:
        """Supervised steps on demonstrations (the expert's; a lazy one's in data.lazy_demos of them); only the
        action tokens are targets (as in the update)."""
        ws = self.cfg.warm_start
        rng = np.random.default_rng([ws.seed, 0x5F7])
        opt = torch.optim.AdamW(model.parameters(), lr=ws.sft_lr, weight_decay=0.0)
        model.train()
        for _ in range(ws.sft_steps):
            rows = [self.repos.demo_ids(t, rng) for t in self.repos.draw(rng, ws.sft_batch_size)]
            ids = torch.tensor([r[0] for r in rows], device=self.device)
            mask = torch.tensor([r[1] for r in rows], device=self.device)[:, 1:]
            logits = model(ids[:, :-1])
            target = ids[:, 1:].masked_fill(mask == 0, -100)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    def attach(self, model: nn.Module) -> None:
        import copy

        self.policy = model
        if self.cfg.placement == "ray":
            from suite.workloads.agentic.ray_rollout import RayAgentic

            self.remote = RayAgentic(self.spec.model.arch, self.spec.model.params(), self.meta, self.spec.data.name,
                                     self.spec.data.params(), self.sampling, self.cfg.rollout_workers,
                                     self.repos.pad_id)
        elif self.cfg.rollout_mode == "async":
            self.actor = copy.deepcopy(_unwrap(model)).eval().requires_grad_(False)

    # ---- rollouts ---------------------------------------------------------------------------------------

    def _envs(self, tasks: list[Any], g: int) -> list[BugFixEnv]:
        return [BugFixEnv(t, self.limits) for t in tasks for _ in range(g)]

    def make_batch(self, net: nn.Module | None, seed: int, step: int) -> dict[str, Any]:
        """One rollout with `net`'s weights (placement ray: the actors' weights): tasks and sampling seeded by
        (seed, step) only."""
        g, c, dc = self.cfg.group_size, self.clock, self.repos.cfg
        rng = np.random.default_rng([seed, step, 0xA6E7])
        tasks = self.repos.draw(rng, self.spec.data.batch_size * self.cfg.minibatches)
        if self.remote is not None:
            ro, old, old_s = self.remote.run(tasks, g, seed * 1_000_003 + step, dc.max_turns, self.context,
                                             dc.tool_workers, self.limits)
        else:
            assert net is not None
            gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
            ro = rollout(net, self._envs(tasks, g), self.repos, self.sampling, gen, dc.max_turns, self.context,
                         dc.tool_workers)
            t = time.perf_counter()
            with torch.no_grad():
                old = token_logprobs(net, ro.sequences, ro.prompt_len, self.sampling.temperature, ro.prompt_mask)
            old_s = time.perf_counter() - t
        c.add("gen", ro.gen_s)
        c.add("tool", ro.tool_s)
        c.add("reward", ro.reward_s)
        c.add("old_log_prob", old_s)
        adv = grpo_loss.group_advantages(ro.rewards, g, self.cfg.normalize_std)
        with c.lock:
            c.rollouts += 1
            c.tokens_generated += ro.gen_tokens
            for tr in ro.trajectories:
                c.episodes += 1
                c.turns += len(tr.turns)
                c.tokens_tool += tr.tool_tokens
                c.ends[tr.end] = c.ends.get(tr.end, 0) + 1
                for turn in tr.turns:
                    c.reasons[turn.reason] = c.reasons.get(turn.reason, 0) + 1
        return {"sequences": ro.sequences, "prompt_mask": ro.prompt_mask, "mask": ro.mask, "advantages": adv,
                "old_logp": old, "rewards": ro.rewards}

    def _sync_weights(self, state: dict[str, torch.Tensor]) -> None:
        t = time.perf_counter()
        if self.remote is not None:
            self.remote.sync(state)
        else:
            assert self.actor is not None
            self.actor.load_state_dict(state)
        self.clock.add("weight_sync", time.perf_counter() - t)

    def _produce(self, state: dict[str, torch.Tensor], version: int, seed: int, step: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.clock.versions.append(version)
        self._sync_weights(state)
        batch = self.make_batch(self.actor, seed, step)
        with self.clock.lock:
            self.clock.rollout_spans.append((t0, time.perf_counter()))
        return batch

    def _snapshot(self) -> tuple[dict[str, torch.Tensor], int]:
        """The trainer's weights (copied: the update goes on while the rollout reads them) and their version."""
        assert self.policy is not None
        t = time.perf_counter()
        state = {k: v.detach().clone() for k, v in _unwrap(self.policy).state_dict().items()}
        self.clock.add("weight_sync", time.perf_counter() - t)
        return state, self._version()

    def _version(self) -> int:
        """Rollouts whose updates the trainer's weights have seen (all `ppo_epochs` x `minibatches` of each)."""
        return self.clock.updates // (self.cfg.ppo_epochs * self.cfg.minibatches)

    def train_batches(self, rank: int, world: int) -> Iterator[Batch]:
        if world != 1:
            raise ValueError("task agentic_grpo runs on one process (world 1)")
        seed = self.ctx.seed
        try:
            if self.cfg.rollout_mode == "sync":
                yield from self._sync(seed)
            else:
                yield from self._async(seed)
        finally:  # the harness drops the iterator when the run ends: the Ray actors go with it
            if self.remote is not None:
                self.remote.close()

    def _sync(self, seed: int) -> Iterator[Batch]:
        assert self.policy is not None
        step = 0
        while True:
            t0 = time.perf_counter()
            self.clock.versions.append(self._version())
            if self.remote is not None:  # the actors generate from the trainer's weights of now
                self._sync_weights(self._snapshot()[0])
            batch = self.make_batch(_unwrap(self.policy), seed, step)
            self.clock.rollout_spans.append((t0, time.perf_counter()))
            yield from self._timed(batch, seed, step)
            step += 1

    def _async(self, seed: int) -> Iterator[Batch]:
        pool = ThreadPoolExecutor(1, thread_name_prefix="rollout")
        try:
            fut: Future = pool.submit(self._produce, *self._snapshot(), seed, 0)
            step = 0
            while True:
                t = time.perf_counter()
                batch = fut.result()
                self.clock.add("wait", time.perf_counter() - t)
                if self.cfg.staleness >= 1:  # rollout k+1 from the weights before update k: overlaps it
                    fut = pool.submit(self._produce, *self._snapshot(), seed, step + 1)
                yield from self._timed(batch, seed, step)
                if self.cfg.staleness == 0:  # on-policy: from the weights after update k
                    fut = pool.submit(self._produce, *self._snapshot(), seed, step + 1)
                step += 1
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _timed(self, batch: dict[str, Any], seed: int, step: int) -> Iterator[Batch]:
        """`ppo_epochs` passes over the rollout, each `minibatches` updates on a shuffle of its task groups (one
        update of the whole rollout when both are 1)."""
        g, mb = self.cfg.group_size, self.cfg.minibatches
        n = int(batch["sequences"].shape[0]) // g
        for epoch in range(self.cfg.ppo_epochs):
            order = (torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + epoch))
                     if mb > 1 else torch.arange(n))
            for part in order.chunk(mb):
                rows = (part[:, None] * g + torch.arange(g)).reshape(-1)
                eval_before, t = self._eval_s, time.perf_counter()
                yield batch if mb == 1 else {k: v[rows] for k, v in batch.items()}
                # the harness updates (and may evaluate) before asking for the next
                end = time.perf_counter()
                self.clock.add("update", end - t - (self._eval_s - eval_before))
                with self.clock.lock:
                    self.clock.update_spans.append((t, end))
                    self.clock.updates += 1

    def batch_samples(self, batch: Batch) -> int:
        return int(batch["sequences"].shape[0]) // self.cfg.group_size

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        p = batch["prompt_mask"].shape[1]
        logp = token_logprobs(model, batch["sequences"], p, self.sampling.temperature, batch["prompt_mask"])
        loss, _ = grpo_loss.policy_loss(logp, batch["old_logp"], batch["advantages"], batch["mask"], self.cfg)
        return loss

    # ---- evaluation -------------------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        t = time.perf_counter()
        k, tasks = self.repos.cfg.pass_k, self.repos.held_out
        gen = torch.Generator().manual_seed(0xE7A1)
        ro = rollout(_unwrap(model), self._envs(tasks, k), self.repos, self.eval_sampling, gen,
                     self.repos.cfg.max_turns, self.context, self.repos.cfg.tool_workers)
        solved = ro.rewards.view(len(tasks), k)
        self._eval_s += time.perf_counter() - t
        return {"pass_at_k": float((solved.max(1).values > 0).float().mean()), "pass_at_1": float(solved.mean()),
                "mean_turns": float(np.mean([len(tr.turns) for tr in ro.trajectories]))}

    # ---- FLOPs and the report ---------------------------------------------------------------------------

    def tokens_per_sample(self) -> int:
        """Positions the update's forward computes for one task: G episodes padded to the context, less one."""
        return self.cfg.group_size * (self.context - 1)

    def flops_per_sample(self) -> float:
        """The update of one task's G episodes: 6N per position plus attention (12 L H Q T, the `full`
        convention), as task grpo counts it; generation is not in it (its positions vary with the episode)."""
        cfg = self.model_cfg
        n = float(self.model_component.active_matmul_params(cfg, self.meta))
        attention = 12.0 * cfg.n_layer * cfg.n_head * cfg.head_size * (self.context - 1)
        return self.tokens_per_sample() * (6.0 * n + attention)

    def train_samples(self) -> int:
        return int(self.repos.train_size)

    def eval_samples(self) -> int:
        return len(self.repos.held_out)

    def mllog_samples_per_sample(self) -> int:
        """MLPerf's GRPO samples are completions: each of a step's prompts is G of them in the log's samples_count
        (the result's `samples` stay prompts, the unit of data.batch_size)."""
        return self.cfg.group_size

    def mllog_hyperparameters(self) -> dict[str, Any]:
        return mllog_keys(self.spec)

    def phase_report(self, peak_flops_per_s: float | None, dtype: str) -> dict[str, Any]:
        out = self.clock.report()
        out.update({"rollout_mode": self.cfg.rollout_mode, "staleness": self.cfg.staleness,
                    "placement": self.cfg.placement,
                    "rollout_workers": self.cfg.rollout_workers if self.remote is not None else 0, "sandbox": enforced(), "dtype": dtype})
        return out

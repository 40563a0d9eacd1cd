"""PPO (Schulman et al. 2017) on a gymnasium environment. One harness step is one minibatch update: the
batch iterator collects a rollout with the attached policy, computes GAE advantages, then yields
`epochs` shuffled passes of minibatches over it. Evaluation: mean return of greedy episodes on fixed seeds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from suite.data.rl.gym_env import Config as EnvConfig
from suite.data.rl.gym_env import make_vec
from suite.workloads.base import WorkloadBase
from suite.workloads.checks import PPOChecks
from suite.workloads.contract import Batch, Context


def _unwrap(model: nn.Module) -> Any:
    """The policy network itself (its distribution, obs_norm, greedy), under whatever wraps it: torch.compile
    (`_orig_mod`), DDP or a DeepSpeed engine and its eval view (`module`)."""
    for _ in range(8):  # a few wrappers deep at most; a loop guard, not a limit anyone reaches
        inner = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
        if not isinstance(inner, nn.Module):
            break
        model = inner
    return model


class RunningStd:
    """Std of the discounted return, for reward scaling (the `VecNormalize` trick MuJoCo PPO relies on)."""

    def __init__(self, n_envs: int, gamma: float):
        self.ret = np.zeros(n_envs)
        self.gamma = gamma
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def scale(self, reward: np.ndarray, done: np.ndarray) -> np.ndarray:
        self.ret = self.ret * self.gamma + reward
        b_mean, b_var, n = float(self.ret.mean()), float(self.ret.var()), self.ret.size
        delta, total = b_mean - self.mean, self.count + n
        self.mean += delta * n / total
        self.var = (self.var * self.count + b_var * n + delta**2 * self.count * n / total) / total
        self.count = total
        self.ret[done] = 0.0
        return reward / np.sqrt(self.var + 1e-8)


def gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray, terminated: np.ndarray,
        done: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """Generalised advantage estimation over T x E arrays. `next_values[t]` is V of the state after step t
    (the final observation when the episode ended there; 0 added for a true termination); `done[t]` cuts
    the recursion at episode ends, whether terminated or truncated."""
    T = rewards.shape[0]
    adv = np.zeros_like(rewards)
    last = np.zeros(rewards.shape[1])
    for t in range(T - 1, -1, -1):
        delta = rewards[t] + gamma * next_values[t] * (1.0 - terminated[t]) - values[t]
        last = delta + gamma * lam * (1.0 - done[t]) * last
        adv[t] = last
    return adv


class PPO(PPOChecks, WorkloadBase):
    def __init__(self, spec, ctx: Context):
        super().__init__(spec, ctx)
        self.env_cfg: EnvConfig = self.data_cfg
        self.meta: dict[str, Any] = self.data_component.load(self.data_cfg)
        self.policy: Any = None
        cfg = self.env_cfg
        if spec.data.batch_size > cfg.n_envs * cfg.n_steps:
            raise ValueError(f"data.batch_size {spec.data.batch_size} is larger than a rollout "
                             f"(n_envs x n_steps = {cfg.n_envs * cfg.n_steps})")
        self.eval_env = make_vec(cfg, cfg.eval_episodes)
        self.episodes_done = 0
        self.env_steps = 0

    def build_model(self) -> nn.Module:
        return self.model_component.build(self.model_cfg, self.meta)

    def attach(self, model: nn.Module) -> None:
        self.policy = model

    def _act(self, obs: np.ndarray, greedy: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        assert self.policy is not None, "PPO.attach(model) must be called before rollouts (the harness does)"
        net = _unwrap(self.policy)
        o = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        head, value = self.policy(o)
        if greedy:
            a = net.greedy(head)
            return a.cpu().numpy(), np.zeros(0), value.cpu().numpy(), o.cpu().numpy()
        dist = net.distribution(head)
        a = dist.sample()
        return a.cpu().numpy(), net.log_prob(dist, a).cpu().numpy(), value.cpu().numpy(), o.cpu().numpy()

    def _env_action(self, a: np.ndarray) -> np.ndarray:
        if self.meta["continuous"]:
            return np.clip(a, self.meta["act_low"], self.meta["act_high"])
        return a

    @torch.no_grad()
    def _rollout(self, env: Any, state: dict[str, Any]) -> dict[str, np.ndarray]:
        cfg, net = self.env_cfg, _unwrap(self.policy)  # type: ignore[arg-type]
        T, E = cfg.n_steps, cfg.n_envs
        obs_l: list[np.ndarray] = []
        act_l: list[np.ndarray] = []
        logp_l: list[np.ndarray] = []
        val_l: list[np.ndarray] = []
        rew_l: list[np.ndarray] = []
        term_l: list[np.ndarray] = []
        done_l: list[np.ndarray] = []
        valid_l: list[np.ndarray] = []
        obs, prev_done = state["obs"], state["prev_done"]
        for _ in range(T):
            if cfg.normalize_obs:
                net.obs_norm.update(torch.as_tensor(obs[~prev_done] if (~prev_done).any() else obs,
                                                    dtype=torch.float32, device=self.device))
            a, logp, v, _ = self._act(obs)
            next_obs, r, term, trunc, _ = env.step(self._env_action(a))
            done = term | trunc
            # NEXT_STEP autoreset: the step after an episode end only resets that env; it is not a transition
            valid = ~prev_done
            r = np.where(valid, r, 0.0)
            self.episodes_done += int((done & valid).sum())
            self.env_steps += int(valid.sum())
            if state["scaler"] is not None:
                r = state["scaler"].scale(r, done & valid)
            if cfg.reward_clip is not None:  # CleanRL: TransformReward(clip(-10, 10)) after NormalizeReward
                r = np.clip(r, -cfg.reward_clip, cfg.reward_clip)
            obs_l.append(obs)
            act_l.append(a)
            logp_l.append(logp)
            val_l.append(v)
            rew_l.append(r)
            # CleanRL cuts at any episode end (next_done = terminated or truncated); bootstrapping a truncation
            # from the final observation is the other choice (bootstrap_truncation)
            term_l.append((term if cfg.bootstrap_truncation else done) & valid)
            done_l.append(done & valid)
            valid_l.append(valid)
            obs, prev_done = next_obs, done & valid
        # V of each step's successor: the next stored obs, or, at an episode end, the obs the done step returned
        succ = np.stack(obs_l[1:] + [obs])
        o = torch.as_tensor(succ.reshape(T * E, -1), dtype=torch.float32, device=self.device)
        nval = self.policy(o)[1].cpu().numpy().reshape(T, E)  # type: ignore[misc]
        state["obs"], state["prev_done"] = obs, prev_done
        values = np.stack(val_l)
        adv = gae(np.stack(rew_l), values, nval, np.stack(term_l).astype(np.float64),
                  np.stack(done_l).astype(np.float64), cfg.gamma, cfg.gae_lambda)
        valid = np.stack(valid_l).reshape(-1)
        flat = {"obs": np.stack(obs_l).reshape(T * E, -1), "act": np.stack(act_l).reshape(T * E, *np.shape(a)[1:]),
                "logp": np.stack(logp_l).reshape(-1), "adv": adv.reshape(-1),
                "ret": (adv + values).reshape(-1), "val": values.reshape(-1)}
        return {k: v[valid] for k, v in flat.items()}

    def train_batches(self, rank: int, world: int) -> Iterator[Batch]:
        cfg = self.env_cfg
        bs = self.local_batch_size(world)
        env = make_vec(cfg, cfg.n_envs)
        seed = self.ctx.seed * 10_007 + rank * cfg.n_envs
        obs, _ = env.reset(seed=seed)
        state: dict[str, Any] = {"obs": obs, "prev_done": np.zeros(cfg.n_envs, dtype=bool),
                                 "scaler": RunningStd(cfg.n_envs, cfg.gamma) if cfg.scale_rewards else None}
        rng = np.random.default_rng([self.ctx.seed, rank])
        try:
            while True:
                roll = self._rollout(env, state)
                n = roll["obs"].shape[0]
                tensors = {k: torch.as_tensor(v, dtype=torch.float32 if k != "act" or self.meta["continuous"]
                                              else torch.long) for k, v in roll.items()}
                for _ in range(cfg.epochs):
                    perm = rng.permutation(n)
                    for i in range(n // bs):
                        idx = torch.from_numpy(perm[i * bs : (i + 1) * bs])
                        yield {k: v[idx] for k, v in tensors.items()}
        finally:
            env.close()

    def batch_samples(self, batch: Batch) -> int:
        return int(batch["obs"].shape[0])

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        cfg, net = self.env_cfg, _unwrap(model)
        head, value = model(batch["obs"])
        dist = net.distribution(head)
        logp = net.log_prob(dist, batch["act"])
        adv = batch["adv"]
        adv = (adv - adv.mean()) / (adv.std() + 1e-8) if adv.numel() > 1 else adv
        ratio = (logp - batch["logp"]).exp()
        policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * adv).mean()
        value_loss = (value - batch["ret"]).pow(2)
        if cfg.clip_vloss:  # CleanRL ppo_continuous_action.py clip_vloss: the value moves at most clip from the old one
            clipped = batch["val"] + (value - batch["val"]).clamp(-cfg.clip, cfg.clip)
            value_loss = torch.max(value_loss, (clipped - batch["ret"]).pow(2))
        value_loss = 0.5 * value_loss.mean()
        return policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * net.entropy(dist).mean()

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        saved, self.policy = self.policy, model
        was_training = model.training
        model.eval()
        n = self.env_cfg.eval_episodes
        obs, _ = self.eval_env.reset(seed=self.env_cfg.eval_seed)  # seeds eval_seed + i: fixed for every run
        returns, lengths = np.zeros(n), np.zeros(n, dtype=np.int64)
        finished = np.zeros(n, dtype=bool)
        while not finished.all():
            a = self._act(obs, greedy=True)[0]
            obs, r, term, trunc, _ = self.eval_env.step(self._env_action(a))
            returns += np.where(finished, 0.0, r)
            lengths += ~finished
            finished |= term | trunc
        model.train(was_training)
        self.policy = saved
        return {"mean_return": float(returns.mean()), "min_return": float(returns.min()),
                "mean_length": float(lengths.mean()), "env_steps": float(self.env_steps),
                "episodes": float(self.episodes_done)}

    def flops_per_sample(self) -> float:
        return float(self.model_component.flops_per_sample(self.model_cfg, self.meta))

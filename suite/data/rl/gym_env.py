"""The experience stream of an RL workload: a gymnasium environment and how PPO collects from it.

In an RL spec the `data` block describes where the samples come from (environment, parallel envs, rollout
length, discounting) and `data.batch_size` is the PPO minibatch; `load` probes the spaces only, the
environments themselves are made by the workload. CartPole ships with gymnasium; MuJoCo tasks need the
`mujoco` package (which ships its own assets): pip install 'trainbench-suite[mujoco]'.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from suite.data.base import DataMissing
from suite.registry import Component


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    env_id: str = Field(description="a gymnasium id, e.g. CartPole-v1, HalfCheetah-v5")
    n_envs: int = Field(default=8, gt=0, description="environments stepped in parallel, per rank")
    n_steps: int = Field(default=128, gt=0, description="rollout length per environment")
    epochs: int = Field(default=4, gt=0, description="passes over each rollout")
    gamma: float = Field(default=0.99, gt=0, le=1)
    gae_lambda: float = Field(default=0.95, ge=0, le=1)
    clip: float = Field(default=0.2, gt=0)
    vf_coef: float = Field(default=0.5, ge=0)
    clip_vloss: bool = Field(default=False, description="clip the value update to +-clip around the rollout's value "
                             "(PPO's and CleanRL's value clipping)")
    bootstrap_truncation: bool = Field(default=True, description="a time-limit end bootstraps V(final obs); "
                                       "false: treated as a termination, as CleanRL's PPO does")
    reward_clip: float | None = Field(default=None, gt=0, description="clip (scaled) rewards to +-this (CleanRL: 10)")
    ent_coef: float = Field(default=0.0, ge=0)
    normalize_obs: bool = Field(default=False, description="running mean/std of observations (MuJoCo)")
    scale_rewards: bool = Field(default=False, description="divide rewards by the std of the discounted return")
    eval_episodes: int = Field(default=10, gt=0, description="episodes per evaluation, fixed seeds, greedy actions")
    eval_seed: int = Field(default=1_000_000, ge=0, description="evaluation seeds: eval_seed + i, same for every run")
    env_kwargs: dict[str, Any] = Field(default_factory=dict)


def make_vec(cfg: Config, n: int) -> Any:
    try:
        import gymnasium as gym
    except ImportError:
        raise DataMissing("RL workloads need gymnasium: pip install 'trainbench-suite[rl]'") from None
    try:
        # env kwargs rule out the native vector envs (CartPole's): step copies of the env in one process
        extra: dict[str, Any] = {"vectorization_mode": "sync", **cfg.env_kwargs} if cfg.env_kwargs else {}
        env = gym.make_vec(cfg.env_id, num_envs=n, **extra)
    except (ImportError, ModuleNotFoundError, gym.error.DependencyNotInstalled) as e:
        raise DataMissing(f"environment {cfg.env_id!r} needs a package that is missing ({e}): "
                          "pip install 'trainbench-suite[rl]' (MuJoCo tasks: 'trainbench-suite[mujoco]')") from None
    except gym.error.Error as e:
        raise DataMissing(f"environment {cfg.env_id!r}: {e}") from None
    mode = env.metadata.get("autoreset_mode")
    if mode is not None and getattr(mode, "name", str(mode)) != "NEXT_STEP":
        raise ValueError(f"{cfg.env_id}: autoreset mode {mode}; the PPO rollout expects NEXT_STEP")
    return env


def load(cfg: Config) -> dict[str, Any]:
    env = make_vec(cfg, 1)  # first: without gymnasium it says which package and extra to install (exit 2)
    import gymnasium as gym

    obs, act = env.single_observation_space, env.single_action_space
    env.close()
    if not isinstance(obs, gym.spaces.Box) or len(obs.shape) != 1:
        raise ValueError(f"{cfg.env_id}: observation space {obs} is not a flat Box (this PPO uses an MLP)")
    meta: dict[str, Any] = {"obs_dim": int(obs.shape[0]), "env_id": cfg.env_id, "source": "gymnasium"}
    if isinstance(act, gym.spaces.Discrete):
        meta.update(continuous=False, n_actions=int(act.n))
    elif isinstance(act, gym.spaces.Box) and len(act.shape) == 1:
        meta.update(continuous=True, n_actions=int(act.shape[0]), act_low=act.low.tolist(), act_high=act.high.tolist())
    else:
        raise ValueError(f"{cfg.env_id}: action space {act} is neither Discrete nor a flat Box")
    return meta


COMPONENT = Component(Config, load=load)

"""The suite's GRPO spec in veRL's terms (veRL 0.9.1), each piece usable without a GPU: the spec translated into
veRL's trainer overrides and validated by veRL's own config code (`verl.utils.config.validate_config`, AlgoConfig,
RolloutConfig over its shipped `_generated_ppo_trainer.yaml`), the problems written as veRL's RL parquet, the
suite's reward plug-in as veRL's custom reward function (`compute_score`), and the metrics log veRL's `file`
logger writes (JSONL of {"step", "data"}) read back into the Result's phases and eval curve.

veRL itself is imported only inside the functions that need it (`compose`, `validate`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from suite.algorithms import grpo, grpo_rewards

DATA_SOURCE = "trainbench"
REWARD_ENV = "TRAINBENCH_VERL_REWARD"  # the reward block, as JSON, for compute_score in veRL's reward workers
# veRL's timers (`timing_s/<name>`, marked_timer in verl/trainer/ppo/ray_trainer.py) -> the suite's phase names
TIMING_TO_PHASE = {"gen": "gen", "reward": "reward", "old_log_prob": "old_log_prob", "ref": "ref",
                   "update_actor": "update", "update_weights": "weight_sync"}


def overrides(spec: Any, train_file: Path, val_file: Path, model_path: str, *, gpus_per_node: int = 8,
              nnodes: int = 1, prompt_len: int = 512, response_len: int | None = None) -> dict[str, Any]:
    """veRL trainer overrides (dotted keys, Hydra's `key=value` on its command line) for a `task: grpo` spec."""
    cfg = grpo.Config.model_validate(spec.grpo or {})
    name, params = grpo_rewards.split(cfg.reward)
    batch = spec.data.batch_size * cfg.minibatches  # prompts per rollout
    out: dict[str, Any] = {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": cfg.normalize_std,
        "algorithm.use_kl_in_reward": False,
        "data.train_files": str(train_file),
        "data.val_files": str(val_file),
        "data.train_batch_size": batch,
        "data.max_prompt_length": prompt_len,
        "data.max_response_length": response_len or cfg.rollout.max_new_tokens,
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        "data.seed": 0,
        "actor_rollout_ref.model.path": model_path,
        "actor_rollout_ref.actor.optim.lr": float(spec.optimizer.lr),  # a declared field, not one of params()
        "actor_rollout_ref.actor.optim.weight_decay": float(spec.optimizer.weight_decay),
        "actor_rollout_ref.actor.ppo_mini_batch_size": spec.data.batch_size,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": max(1, spec.data.micro_batch_size or 1),
        "actor_rollout_ref.actor.ppo_epochs": 1,
        "actor_rollout_ref.actor.clip_ratio": cfg.clip_ratio,
        "actor_rollout_ref.actor.use_kl_loss": cfg.kl_coef > 0,
        "actor_rollout_ref.actor.kl_loss_coef": cfg.kl_coef,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.actor.entropy_coeff": 0.0,
        "actor_rollout_ref.actor.loss_agg_mode": "token-mean" if cfg.loss_agg == "token" else "seq-mean-token-mean",
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.n": cfg.group_size,
        "actor_rollout_ref.rollout.temperature": cfg.rollout.temperature,
        "actor_rollout_ref.rollout.top_p": cfg.rollout.top_p,
        "actor_rollout_ref.rollout.response_length": response_len or cfg.rollout.max_new_tokens,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 8,
        "actor_rollout_ref.rollout.val_kwargs.do_sample": cfg.eval_sampling.temperature > 0,
        "actor_rollout_ref.rollout.val_kwargs.temperature": cfg.eval_sampling.temperature,
        "actor_rollout_ref.rollout.val_kwargs.top_p": cfg.eval_sampling.top_p,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 8,
        "custom_reward_function.path": __file__,
        "custom_reward_function.name": "compute_score",
        "reward.custom_reward_function.path": __file__,
        "reward.custom_reward_function.name": "compute_score",
        "trainer.logger": ["console", "file"],
        "trainer.project_name": "trainbench",
        "trainer.experiment_name": spec.name.replace("/", "_"),
        "trainer.n_gpus_per_node": gpus_per_node,
        "trainer.nnodes": nnodes,
        # a veRL training step is one rollout of `minibatches` optimizer updates; the harness counts updates
        "trainer.test_freq": rollouts(spec.eval.every_steps, cfg.minibatches),
        "trainer.val_before_train": spec.eval.at_start,
        "trainer.save_freq": -1,
        "trainer.critic_warmup": 0,
        "trainer.total_training_steps": rollouts(spec.budget.max_steps, cfg.minibatches),
        # the v1 trainer (veRL's default) imports TransferQueue, only in the verl[verl-core] extra; the v0 trainer
        # (verl/trainer/ppo/ray_trainer.py) is the one whose timers TIMING_TO_PHASE names
        "trainer.use_v1": False,
    }
    if name != "exact_match" or params:  # the default needs no environment; anything else travels as JSON
        out["+ray_kwargs.ray_init.runtime_env.env_vars." + REWARD_ENV] = json.dumps(cfg.reward)
    return out


def rollouts(updates: int, minibatches: int) -> int:
    """veRL training steps (rollouts of `minibatches` updates each) covering `updates` harness steps, at least 1."""
    return max(1, -(-int(updates) // max(1, int(minibatches))))


def hydra_args(values: dict[str, Any]) -> list[str]:
    """`key=value` command-line overrides (lists and booleans in Hydra's grammar)."""
    def text(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ",".join(json.dumps(x) for x in v) + "]"
        return json.dumps(v) if isinstance(v, str) and any(c in v for c in " ,[]{}=") else str(v)

    return [f"{k}={text(v)}" for k, v in values.items()]


def compose(values: dict[str, Any]) -> Any:
    """veRL's own default trainer config (the `_generated_ppo_trainer.yaml` it ships) with the overrides merged,
    as an OmegaConf DictConfig; a key veRL does not have is an error naming it."""
    from importlib.resources import files

    from omegaconf import OmegaConf, open_dict

    base = OmegaConf.load(str(files("verl.trainer.config") / "_generated_ppo_trainer.yaml"))
    for key, value in values.items():
        if key.startswith("+"):  # Hydra's "add a key"
            with open_dict(base):
                OmegaConf.update(base, key[1:], value, force_add=True)
            continue
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(base, parent) if parent else base
        if node is None or leaf not in list(node.keys()):  # a mandatory value (???) is a key `in` does not see
            raise KeyError(f"veRL's trainer config has no key {key!r} (verl {_verl_version()})")
        OmegaConf.update(base, key, value)
    return base


def validate(config: Any) -> dict[str, Any]:
    """veRL's checks of a composed config: validate_config (batch sizes against GPUs, micro-batch settings), then
    its dataclasses for the algorithm (AlgoConfig), the actor (ActorConfig, inside validate_config) and the
    rollout (RolloutConfig). Returns the typed objects; raises veRL's own errors."""
    from omegaconf import OmegaConf
    from verl.trainer.config import AlgoConfig
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config import ActorConfig, RolloutConfig

    OmegaConf.resolve(config)  # as verl.trainer.main_ppo does before building its workers
    validate_config(config, use_reference_policy=bool(config.actor_rollout_ref.actor.use_kl_loss), use_critic=False)
    out = {"algorithm": omega_conf_to_dataclass(config.algorithm),  # built from their _target_, as veRL's workers do
           "actor": omega_conf_to_dataclass(config.actor_rollout_ref.actor),
           "rollout": omega_conf_to_dataclass(config.actor_rollout_ref.rollout)}
    for name, cls in (("algorithm", AlgoConfig), ("actor", ActorConfig), ("rollout", RolloutConfig)):
        if not isinstance(out[name], cls):
            raise TypeError(f"veRL built {type(out[name]).__name__} for {name}, not {cls.__name__}")
    return out


def _verl_version() -> str:
    from suite.measure.fingerprint import package_version

    return package_version("verl") or "not installed"


# ---- data and reward ------------------------------------------------------------------------------------


def rows(problems: list[tuple[str, str]], split: str) -> list[dict[str, Any]]:
    """veRL's RL dataset rows (its examples/data_preprocess/gsm8k.py layout): a chat prompt, the rule reward's
    ground truth, the data source its reward function is chosen by."""
    return [{"data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": prompt}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": answer},
             "extra_info": {"split": split, "index": i, "answer": answer, "question": prompt}}
            for i, (prompt, answer) in enumerate(problems)]


def write_parquet(problems: list[tuple[str, str]], path: Path, split: str) -> Path:
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows(problems, split)).to_parquet(path)
    return path


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    """veRL's custom reward function signature, scoring with the suite's reward plug-in (REWARD_ENV, default
    exact_match); a failing plug-in raises RewardError naming the prompt index."""
    block = json.loads(os.environ.get(REWARD_ENV, '"exact_match"'))
    name, fn = grpo_rewards.build(block)
    index = int((extra_info or {}).get("index", -1))
    return grpo_rewards.score(fn, name, [solution_str], [ground_truth], [index])[0]


# ---- metrics ------------------------------------------------------------------------------------------------


def log_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(step, metrics) of each line of veRL's file logger (`trainer.logger: file`), blank lines skipped; a line that
    is not one names the file and line (ValueError)."""
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            step, data = int(record["step"]), dict(record["data"])
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{n}: not a veRL file-logger line ({type(e).__name__}: {e})") from None
        yield step, data


def read_metrics(path: Path) -> dict[str, Any]:
    """The phases and the evaluation curve of a veRL file-logger JSONL: per-phase seconds summed over the steps,
    tokens/s from perf/throughput (per GPU), MFU of the update from perf/mfu/actor, validation scores."""
    seconds = dict.fromkeys(TIMING_TO_PHASE.values(), 0.0)
    throughput: list[float] = []
    mfu: list[float] = []
    curve: list[dict[str, Any]] = []
    steps = 0
    for step, data in log_records(path):
        timed = False
        for name, phase in TIMING_TO_PHASE.items():
            if isinstance(v := data.get(f"timing_s/{name}"), int | float):
                seconds[phase] += float(v)
                timed = True
        steps += timed
        if isinstance(v := data.get("perf/throughput"), int | float):
            throughput.append(float(v))
        if isinstance(v := data.get("perf/mfu/actor"), int | float):
            mfu.append(float(v))
        val = {k: float(v) for k, v in data.items() if k.startswith("val-core/") and isinstance(v, int | float)}
        if val:
            curve.append({"step": step, "metrics": val})
    per = max(steps, 1)
    return {"phases": {"seconds": seconds, "rollout_s_per_step": seconds["gen"] / per,
                       "training_s_per_step": (seconds["old_log_prob"] + seconds["ref"] + seconds["update"]) / per,
                       "weight_sync_s_per_step": seconds["weight_sync"] / per, "updates": steps,
                       "tokens_per_s_per_gpu": sum(throughput) / len(throughput) if throughput else None,
                       "mfu_update": sum(mfu) / len(mfu) if mfu else None, "source": "verl"},
            "curve": curve}

"""veRL as a backend, the parts that run without a GPU (suite/backends/verl/adapt.py, suite/backends/verl/backend.py):
the spec's translation (checked by veRL's own config code where veRL is installed), the parquet data, the reward
adapter, reading veRL's file-logger metrics, and the refusal that says why veRL cannot train here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from suite import devices, registry
from suite.algorithms.grpo_rewards import RewardError
from suite.backends import matrix as support
from suite.backends.verl import adapt as verl_adapt
from suite.backends.verl import launch as verl_launch
from suite.backends.verl.backend import VerlBackend
from suite.data.base import DataMissing
from suite.data.rl import arithmetic
from suite.specload import load_spec
from suite.workloads.contract import Context

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "workloads" / "rl" / "arithmetic_grpo.yaml"


def _overrides(tmp_path: Path, sets=None, **kw):
    spec = load_spec(SPEC, sets or {})
    return spec, verl_adapt.overrides(spec, tmp_path / "train.parquet", tmp_path / "val.parquet", "/models/m", **kw)


def test_the_spec_becomes_verls_grpo_settings(tmp_path):
    spec, o = _overrides(tmp_path, {"grpo.kl_coef": 0.01, "grpo.loss_agg": "sequence"})
    assert o["algorithm.adv_estimator"] == "grpo" and o["actor_rollout_ref.rollout.n"] == spec.grpo["group_size"]
    assert o["actor_rollout_ref.actor.use_kl_loss"] is True and o["actor_rollout_ref.actor.kl_loss_coef"] == 0.01
    assert o["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-mean"
    assert o["actor_rollout_ref.actor.clip_ratio"] == 0.2 and o["data.train_batch_size"] == spec.data.batch_size
    assert o["actor_rollout_ref.rollout.val_kwargs.do_sample"] is False  # greedy evaluation
    assert o["trainer.logger"] == ["console", "file"] and o["trainer.test_freq"] == spec.eval.every_steps
    reward = Path(o["custom_reward_function.path"])
    assert reward.is_file() and f"def {o['custom_reward_function.name']}(" in reward.read_text()
    args = verl_adapt.hydra_args(o)
    assert "algorithm.adv_estimator=grpo" in args and 'trainer.logger=["console","file"]' in args


def test_verl_counts_rollouts_where_the_harness_counts_updates(tmp_path):
    """rl/gsm8k_grpo: 4 updates a rollout; veRL's run_qwen2-7b.sh tests every 5 rollouts over 105 of them."""
    spec = load_spec(ROOT / "workloads" / "rl" / "gsm8k_grpo.yaml")
    o = verl_adapt.overrides(spec, tmp_path / "t.parquet", tmp_path / "v.parquet", "/models/m")
    assert spec.grpo["minibatches"] == 4 and (spec.eval.every_steps, spec.budget.max_steps) == (20, 420)
    assert (o["trainer.test_freq"], o["trainer.total_training_steps"]) == (5, 105)
    assert o["data.train_batch_size"] == 4 * o["actor_rollout_ref.actor.ppo_mini_batch_size"]
    assert verl_adapt.rollouts(5, 4) == 2 and verl_adapt.rollouts(1, 4) == 1  # a part rollout still runs


def test_verls_own_config_code_accepts_the_translation_and_refuses_a_bad_one(tmp_path):
    _, good = _overrides(tmp_path)
    _, bad = _overrides(tmp_path, gpus_per_node=3)  # 16 prompts x 8 completions do not split over 3 GPUs
    built = verl_adapt.validate(verl_adapt.compose(good))
    assert built["algorithm"].adv_estimator == "grpo" and built["rollout"].n == 8
    with pytest.raises(AssertionError, match="must be divisible"):
        verl_adapt.validate(verl_adapt.compose(bad))
    with pytest.raises(KeyError, match="no key 'actor_rollout_ref.rollout.nn'"):
        verl_adapt.compose({"actor_rollout_ref.rollout.nn": 8})


def test_the_command_line_is_the_one_verls_hydra_composes_and_validates(tmp_path):
    """The very `key=value` strings main_ppo gets, through Hydra's compose of veRL's ppo_trainer (its defaults list),
    then veRL's validate_config and config classes: what the run launches is what was checked."""
    spec, values = _overrides(tmp_path, gpus_per_node=1, prompt_len=6)
    config = verl_launch.compose_cli(verl_adapt.hydra_args(values))
    built = verl_adapt.validate(config)
    assert config.actor_rollout_ref.actor.optim.lr == spec.optimizer.lr == 3e-4  # the spec's lr, not a default
    assert list(config.trainer.logger) == ["console", "file"] and config.trainer.use_v1 is False
    assert config.data.max_prompt_length == 6 and built["rollout"].n == spec.grpo["group_size"]
    assert config.custom_reward_function.path == verl_adapt.__file__
    with pytest.raises(Exception, match="nn"):  # Hydra: no such key in veRL's config
        verl_launch.compose_cli(["actor_rollout_ref.rollout.nn=8"])
    _, three = _overrides(tmp_path, gpus_per_node=3)
    with pytest.raises(AssertionError, match="must be divisible"):
        verl_adapt.validate(verl_launch.compose_cli(verl_adapt.hydra_args(three)))


def test_the_policy_is_written_as_a_model_folder_transformers_reads(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = load_spec(SPEC, {}, "tiny")
    workload = registry.task_class("grpo")(spec, Context(data_root=tmp_path, seed=0, device=torch.device("cpu")))
    policy = workload.build_model()
    folder = verl_launch.write_model(workload, policy, tmp_path / "model")
    tok = AutoTokenizer.from_pretrained(folder)
    prompt = workload.eval_problems[0][0]
    ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert ids == workload.problems.encode(prompt)  # veRL's dataset gives the model the suite's own prompt
    assert (tok.pad_token_id, tok.eos_token_id) == (workload.problems.pad_id, workload.problems.eos_id)
    answer = workload.problems.encode("57") + [workload.problems.eos_id]
    assert tok.decode(answer, skip_special_tokens=True) == "57"
    hf = AutoModelForCausalLM.from_pretrained(folder)
    x = torch.tensor([ids])
    with torch.no_grad():
        assert torch.allclose(hf(x).logits, policy(x), atol=1e-5)
    assert hf.generation_config.eos_token_id == workload.problems.eos_id
    # a node whose GPUs veRL's own checks refuse for this spec: bad input before the clock (exit 2, nothing recorded)
    with pytest.raises(verl_launch.VerlRefused, match=r"on this node \(3 GPU\(s\)\): AssertionError: .*divisible"):
        verl_launch.prepare(spec, workload, policy, tmp_path / "run", gpus=3, seed=0)
    assert issubclass(verl_launch.VerlRefused, DataMissing)


def test_the_problems_are_written_in_verls_rl_parquet_layout(tmp_path):
    problems = arithmetic.load(arithmetic.Config(digits=2, eval_problems=4)).eval_set()
    path = verl_adapt.write_parquet(problems, tmp_path / "val.parquet", "test")
    frame = pd.read_parquet(path)
    assert list(frame.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    row = frame.iloc[1]
    assert list(row["prompt"]) == [{"role": "user", "content": problems[1][0]}]
    assert row["reward_model"] == {"style": "rule", "ground_truth": problems[1][1]}
    assert row["extra_info"]["index"] == 1 and row["data_source"] == verl_adapt.DATA_SOURCE


def test_the_suites_reward_is_verls_custom_reward_function(tmp_path, monkeypatch):
    assert verl_adapt.compute_score(verl_adapt.DATA_SOURCE, " 57", "57", {"index": 3}) == 1.0
    (tmp_path / "my_verl_reward.py").write_text("def bad(completion, answer):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(verl_adapt.REWARD_ENV, json.dumps("my_verl_reward:bad"))
    try:
        with pytest.raises(RewardError, match="'my_verl_reward:bad' returned None for prompt index 3"):
            verl_adapt.compute_score(verl_adapt.DATA_SOURCE, "57", "57", {"index": 3})
    finally:
        sys.modules.pop("my_verl_reward", None)


def test_a_verl_metrics_log_becomes_phases_and_an_eval_curve(tmp_path):
    log = tmp_path / "gsm8k.jsonl"  # what verl.utils.tracking.FileLogger writes: {"step": n, "data": {...}} a line
    lines = [{"step": s, "data": {"timing_s/gen": 2.0 + s, "timing_s/old_log_prob": 0.5, "timing_s/ref": 0.25,
                                  "timing_s/update_actor": 1.0, "timing_s/update_weights": 0.1,
                                  "timing_s/step": 4.0 + s, "perf/throughput": 1000.0 * s, "perf/mfu/actor": 0.3}}
             for s in (1, 2)]
    lines.append({"step": 2, "data": {"val-core/trainbench/reward/mean@1": 0.75}})
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    got = verl_adapt.read_metrics(log)
    ph = got["phases"]
    assert ph["seconds"]["gen"] == 7.0 and ph["seconds"]["update"] == 2.0 and ph["seconds"]["weight_sync"] == 0.2
    assert ph["rollout_s_per_step"] == 3.5 and ph["training_s_per_step"] == 1.75 and ph["updates"] == 2
    assert ph["tokens_per_s_per_gpu"] == 1500.0 and ph["mfu_update"] == 0.3
    assert got["curve"] == [{"step": 2, "metrics": {"val-core/trainbench/reward/mean@1": 0.75}}]
    log.write_text("not json\n")
    with pytest.raises(ValueError, match=r"gsm8k\.jsonl:1: not a veRL file-logger line"):
        verl_adapt.read_metrics(log)


def test_env_and_the_matrix_say_why_verl_cannot_train_here():
    spec = load_spec(SPEC)
    reason = support.unsupported_reason("verl", spec)
    assert reason is not None and "verl-project/verl#3266" in reason and "Total available GPUs 0" in reason
    avail = VerlBackend(devices.current(0)).available()
    assert not avail.ok and "verl#3266" in avail.reason
    other = load_spec(ROOT / "workloads" / "cv" / "digits_cnn.yaml")
    assert "task grpo" in support.unsupported_reason("verl", other)


def test_a_cuda_node_without_verls_rollout_engine_is_refused_naming_it(monkeypatch):
    """veRL 0.9.1's trainer rolls out with vllm (or sglang / trtllm) and imports modules the plain wheel lacks: a
    node without them is refused before the clock, naming what to install."""
    import importlib.util

    from suite.backends.verl import backend as verl_backend
    from suite.backends.verl import options as verl_options

    monkeypatch.setattr(verl_backend, "_cuda_count", lambda: 1)
    monkeypatch.setattr(verl_options, "_cuda_count", lambda: 1)  # where `supports` looks it up (torch-free)
    present = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else present(n, *a))
    spec = load_spec(SPEC)
    reason = support.unsupported_reason("verl", spec)
    assert reason.startswith("veRL's trainer cannot start here: vllm") and "verl[vllm]==0.9.1" in reason
    assert not VerlBackend(devices.current(0)).available().ok
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object())  # everything there
    assert support.unsupported_reason("verl", spec) is None and VerlBackend(devices.current(0)).available().ok

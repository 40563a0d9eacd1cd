"""rl/gsm8k_grpo's tiny variant end to end on files the fixture writes in the real formats (a Qwen2 folder, veRL's
GSM8K parquet): prompts of different lengths left-padded and masked (the padded batch gives each row the logits and
the greedy completion it gets alone), the MLLOG carrying the keys of MLPerf 6.1's GRPO rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.mllog_rules import closed_rules_check

from suite import harness
from suite.data.synthetic import gsm8k as fixture
from suite.models.common.generation import Sampling, generate, token_logprobs
from suite.specload import load_spec

GRPO_RULES = "closed_qwen35_397b_grpo.yaml"  # MLPerf 6.1's GRPO rules

torch.set_num_threads(1)
SPEC = Path(__file__).resolve().parents[2] / "workloads" / "rl" / "gsm8k_grpo.yaml"


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("trainbench-data")
    fixture.write(root / "gsm8k-tiny")
    return root


def test_left_padded_prompts_give_each_row_its_own_logits_and_completion(data_root):
    from suite.data.rl import gsm8k
    from suite.models.hf import checkpoint as hf_checkpoint

    model_dir = data_root / "gsm8k-tiny" / "model"
    model = hf_checkpoint.load_llama(model_dir, hf_checkpoint.config_for(model_dir)).eval()
    problems = gsm8k.load(gsm8k.Config(path=str(data_root / "gsm8k-tiny" / "data"), tokenizer=str(model_dir)))
    batch = list({len(ids): (ids, a) for ids, a in problems.train}.values())[:3]
    assert len({len(ids) for ids, _ in batch}) == 3
    prompts, mask = problems.prompts(batch), problems.prompt_mask(batch)
    s = Sampling(temperature=0.0, max_new_tokens=6, stop_tokens=problems.stop_ids)
    padded = generate(model, prompts, s, pad_id=problems.pad_id, prompt_mask=mask)
    recomputed = generate(model, prompts, s, pad_id=problems.pad_id, prompt_mask=mask, use_cache=False)
    assert torch.equal(padded.completion, recomputed.completion)
    lp = token_logprobs(model, padded.sequences, prompts.shape[1], 1.0, mask)
    for i, (ids, _) in enumerate(batch):
        alone = generate(model, torch.tensor([ids]), s, pad_id=problems.pad_id)
        n = int(padded.mask[i].sum())
        assert padded.completion[i, :n].tolist() == alone.completion[0, :n].tolist()
        ref = token_logprobs(model, alone.sequences, len(ids), 1.0)
        assert torch.allclose(lp[i, :n], ref[0, :n], atol=1e-4), (lp[i, :n], ref[0, :n])
    with torch.no_grad():  # without the mask the padding is attended to: the rows change
        unmasked = token_logprobs(model, padded.sequences, prompts.shape[1], 1.0)
    assert not torch.allclose(unmasked[0, :4], lp[0, :4], atol=1e-4)


def test_the_tiny_recipe_runs_and_its_mllog_carries_mlperfs_grpo_keys(data_root, tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINBENCH_DATA", str(data_root))
    spec = load_spec(SPEC, {}, "tiny")
    result, path = harness.run(harness.RunRequest(spec=spec, results_dir=tmp_path, threads=1, measure_peak=False))
    assert result.status == "budget", result.error
    ph = result.phases
    assert ph["tokens_generated"] > 0 and ph["seconds"]["gen"] > 0 and ph["seconds"]["ref"] > 0  # kl_coef > 0
    assert ph["rollouts"] == 2 and result.steps == 4  # 2 updates a rollout (grpo.minibatches)
    text = path.with_suffix(".mllog").read_text()
    assert '"key": "num_generations_per_prompt", "value": 4' in text and '"value": "gsm8k"' not in text
    failed, missing = closed_rules_check(GRPO_RULES, path.with_suffix(".mllog"))
    assert not missing, missing  # every key the rules name is logged
    # what fails pins the 397B benchmark's own values, not this recipe's (its sampling, G=16, LR formula, ...)
    assert failed <= {"opt_base_learning_rate", "opt_gradient_clip_norm", "max_sequence_length", "eval_samples",
                      "eval_accuracy", "num_generations_per_prompt", "generation_validation_rollout_temperature",
                      "generation_validation_rollout_top_p", "global_batch_size", "opt_adamw_weight_decay"}, failed


def test_the_full_recipe_maps_to_verls_run_qwen2_7b_values():
    """The full spec's values, read back through the grpo workload's MLLOG keys and veRL's overrides."""
    from suite.backends.verl import adapt as verl_adapt

    spec = load_spec(SPEC)
    o = verl_adapt.overrides(spec, Path("train.parquet"), Path("test.parquet"), "Qwen2-7B-Instruct",
                             response_len=1024)
    assert o["data.train_batch_size"] == 1024 and o["actor_rollout_ref.actor.ppo_mini_batch_size"] == 256
    assert o["actor_rollout_ref.rollout.n"] == 5 and o["actor_rollout_ref.actor.kl_loss_coef"] == 0.001
    assert o["actor_rollout_ref.actor.use_kl_loss"] and o["actor_rollout_ref.actor.optim.lr"] == 1e-6
    assert o["data.max_prompt_length"] == 512 and o["data.max_response_length"] == 1024
    assert spec.model.params()["qkv_bias"] and "full" in spec.tiers and spec.mlperf_benchmark is None


def test_a_tokenizer_larger_than_the_checkpoints_embedding_is_refused(data_root, tmp_path, monkeypatch):
    """A padded embedding (more rows than the tokenizer has ids, as Qwen2's) loads; fewer rows is another vocabulary."""
    from suite import registry
    from suite.data.base import DataMissing
    from suite.models.hf import checkpoint as hf_checkpoint
    from suite.models.llama import config as llama_config
    from suite.models.llama import model as llama
    from suite.workloads.contract import Context

    small = {**fixture.SHAPE, "vocab_size": 256}
    hf_checkpoint.save_llama(llama.build(llama_config.Config(**small, seq_len=272), {}), tmp_path / "small")
    monkeypatch.setenv("TRAINBENCH_DATA", str(data_root))
    spec = load_spec(SPEC, {"model.checkpoint": str(tmp_path / "small"), "model.vocab_size": 256}, "tiny")
    workload = registry.task_class("grpo")(spec, Context(data_root=data_root, seed=0, device=torch.device("cpu")))
    with pytest.raises(DataMissing, match="has 320 tokens but the checkpoint .* has a vocabulary of 256"):
        workload.build_model()


def test_verl_gets_the_released_model_and_the_data_sets_own_parquet(data_root, tmp_path, monkeypatch):
    """Under veRL the recipe hands over what it read, not a copy: the checkpoint folder (with its tokenizer) and
    GSM8K's parquet in veRL's layout; the command line is composed by veRL's Hydra config and checked by its code."""
    pytest.importorskip("verl")
    from suite import registry
    from suite.backends.verl import launch as verl_launch
    from suite.workloads.contract import Context

    monkeypatch.setenv("TRAINBENCH_DATA", str(data_root))
    spec = load_spec(SPEC, variant="tiny")
    workload = registry.task_class("grpo")(spec, Context(data_root=data_root, seed=0, device=torch.device("cpu")))
    policy = workload.build_model()
    prepared = verl_launch.prepare(spec, workload, policy, tmp_path / "run", gpus=1, seed=0)
    data = prepared.config.data
    assert Path(prepared.config.actor_rollout_ref.model.path) == data_root / "gsm8k-tiny" / "model"
    assert Path(data.train_files) == data_root / "gsm8k-tiny" / "data" / "train.parquet"
    assert Path(data.val_files) == data_root / "gsm8k-tiny" / "data" / "test.parquet"
    assert not (tmp_path / "run" / "model").exists()  # nothing copied
    # 4 harness updates of 2 minibatches each: 2 veRL rollouts, evaluated after each
    assert (prepared.config.trainer.total_training_steps, prepared.config.trainer.test_freq) == (2, 1)

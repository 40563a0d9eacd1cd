"""rl/qwen35_397b_grpo's harness-written MLLOG counts MLPerf's samples: completions (prompts x G), and its first
evaluation follows the checker's rule through `eval.first_step` (closed_qwen35_397b_grpo.yaml: the first
validation at GBS x ceil(2.5 + 3840 / GBS) samples, then one every GBS). Checked with mlperf-logging's official
rules on a log the harness writes: the tiny variant's model at the recipe's GBS 256 (16 prompts x G 16), its
episodes one-turn (env.SingleTurn, the contract's one-turn case) so that the 18 steps to the first validation stay
quick; the same run one step early is the negative control."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from support.mllog_rules import closed_rules_check

from suite import harness
from suite.measure.mllog import parse
from suite.specload import load_spec
from suite.workloads.agentic.env import SingleTurn
from suite.workloads.agentic.task import AgenticGRPO

GRPO_RULES = "closed_qwen35_397b_grpo.yaml"  # MLPerf 6.1's GRPO rules

torch.set_num_threads(1)
SPEC = Path(__file__).resolve().parents[2] / "workloads" / "rl" / "qwen35_397b_grpo.yaml"
GBS_256 = {"data.batch_size": 16, "grpo.group_size": 16, "optimizer.lr": 1e-6, "backends.torch.grad_clip": 0.125,
           "data.max_turns": 1, "grpo.rollout.max_new_tokens": 2, "grpo.eval_sampling.max_new_tokens": 2,
           "eval.every_steps": 1}


def _one_turn(self, tasks, g):  # a stand-in environment: one action, rewarded when it is the expert's first
    return [SingleTurn("fix m.py\n", "cat", lambda action, answer: float(action.strip() == answer))
            for _ in tasks for _ in range(g)]


def _run(tmp_path: Path, monkeypatch, **over) -> tuple[list[dict], Path]:
    monkeypatch.setattr(AgenticGRPO, "_envs", _one_turn)
    spec = load_spec(SPEC, {**GBS_256, **over}, "tiny")
    result, path = harness.run(harness.RunRequest(spec=spec, results_dir=tmp_path, threads=1, measure_peak=False))
    assert result.status == "budget", result.error
    assert result.samples == spec.budget.max_steps * 16  # the result keeps prompts, data.batch_size's unit
    log = path.with_suffix(".mllog")
    return parse(log.read_text()), log


def _evals(events: list[dict]) -> list[tuple[int, int]]:
    return [(e["metadata"]["step_num"], e["metadata"]["samples_count"]) for e in events if e["key"] == "eval_accuracy"]


def test_the_spec_first_step_is_the_rules_first_validation():
    spec = load_spec(SPEC)
    gbs = spec.data.batch_size * spec.grpo["group_size"]
    assert spec.eval.first_step * gbs == gbs * math.ceil(2.5 + 3840 / gbs) == 4608
    assert load_spec(SPEC, {}, "tiny").eval.first_step is None


@pytest.mark.slow
def test_a_harness_log_counts_completions_and_evaluates_first_where_the_rules_say(tmp_path, monkeypatch):
    events, log = _run(tmp_path / "ok", monkeypatch, **{"eval.first_step": 18, "budget.max_steps": 19})
    assert _evals(events) == [(18, 18 * 256), (19, 19 * 256)]
    stop = next(e for e in events if e["key"] == "run_stop")
    assert stop["metadata"]["samples_count"] == 19 * 256
    failed, other = closed_rules_check(GRPO_RULES, log)
    assert not other, other
    # what pins the 397B model (65,536 tokens, 251 tasks) fails; eval_accuracy's sample counts pass
    assert failed == {"max_sequence_length", "eval_samples"}, failed

    # negative control: without eval.first_step the harness evaluates from step 1, which the rule fails
    events, log = _run(tmp_path / "early", monkeypatch, **{"eval.first_step": None, "budget.max_steps": 2})
    assert _evals(events) == [(1, 256), (2, 512)]
    failed, _ = closed_rules_check(GRPO_RULES, log)
    assert failed == {"max_sequence_length", "eval_samples", "eval_accuracy"}, failed

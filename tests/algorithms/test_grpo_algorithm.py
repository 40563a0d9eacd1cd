"""GRPO's algorithm (suite/algorithms/grpo.py) and its reward plug-ins (suite/algorithms/grpo_rewards.py): advantages,
the clipped loss and its KL term, token vs sequence averaging, and the refusals of the `grpo:` block."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from suite.algorithms import grpo, grpo_loss, grpo_rewards
from suite.spec import SpecError
from suite.specload import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "workloads" / "rl" / "arithmetic_grpo.yaml"


def test_group_advantages_normalise_within_each_group():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    adv = grpo_loss.group_advantages(rewards, 4)
    first = rewards[:4]
    torch.testing.assert_close(adv[:4], (first - first.mean()) / (first.std() + 1e-6))
    assert adv[4:].abs().max() == 0  # every completion equally good: nothing to learn from that prompt
    assert torch.equal(grpo_loss.group_advantages(rewards, 4, normalize_std=False)[:4], first - first.mean())


def _cfg(**kw) -> grpo.Config:
    return grpo.Config(**kw)


def test_the_clipped_loss_stops_the_gradient_beyond_the_clip():
    mask = torch.ones(1, 3)
    old = torch.zeros(1, 3)
    for adv, shift, grads in ((1.0, 0.5, False), (1.0, 0.1, True), (-1.0, -0.5, False), (-1.0, 0.5, True)):
        logp = (old + shift).requires_grad_(True)  # ratio e^shift: 1.65 / 1.11 / 0.61 / 1.65
        loss, parts = grpo_loss.policy_loss(logp, old, torch.tensor([adv]), mask, _cfg(clip_ratio=0.2))
        loss.backward()
        assert (logp.grad.abs().sum() > 0) == grads, (adv, shift)
        assert math.isclose(parts["clip_frac"], 1.0 if abs(math.exp(shift) - 1) > 0.2 else 0.0)


def test_token_and_sequence_averaging_differ_on_unequal_lengths():
    logp = torch.zeros(2, 4)
    mask = torch.tensor([[1.0, 0, 0, 0], [1, 1, 1, 1]])
    adv = torch.tensor([1.0, -1.0])
    token, _ = grpo_loss.policy_loss(logp, logp, adv, mask, _cfg(loss_agg="token"))
    seq, _ = grpo_loss.policy_loss(logp, logp, adv, mask, _cfg(loss_agg="sequence"))
    assert math.isclose(float(token), -(1 - 4) / 5, rel_tol=1e-6)  # every token counts once: the long completion weighs 4x
    assert math.isclose(float(seq), 0.0, abs_tol=1e-7)  # each completion counts once


def test_kl_penalty_is_zero_at_the_reference_and_positive_away_from_it():
    logp = torch.log_softmax(torch.randn(3, 5), -1)
    assert float(grpo_loss.kl_low_var(logp, logp).abs().max()) == 0
    assert float(grpo_loss.kl_low_var(logp, logp + 0.3).min()) > 0
    mask, adv = torch.ones(3, 5), torch.zeros(3)
    loss, parts = grpo_loss.policy_loss(logp, logp, adv, mask, _cfg(kl_coef=0.5), ref_logp=logp - 0.2)
    assert parts["kl"] > 0 and math.isclose(float(loss), 0.5 * parts["kl"], rel_tol=1e-6)


def test_group_size_below_two_is_refused_at_load():
    with pytest.raises(SpecError, match=r"grpo\.group_size.*G < 2 leaves no group"):
        load_spec(SPEC, {"grpo.group_size": 1})


def test_a_reward_that_does_not_import_is_refused_at_load():
    with pytest.raises(SpecError, match=r"grpo\.reward: reward 'no_such_pkg\.rewards:score': cannot import module"):
        load_spec(SPEC, {"grpo.reward": "no_such_pkg.rewards:score"})
    with pytest.raises(SpecError, match=r"grpo\.reward .math:pi. is a float, not a function fn\(completion, answer"):
        load_spec(SPEC, {"grpo.reward": "math:pi"})


USER_REWARD = '''
def close_enough(completion, answer, tolerance=0):
    try:
        return float(abs(int(completion) - int(answer)) <= tolerance)
    except ValueError:
        return 0.0


def broken(completion, answer):
    raise KeyError("no such field")


def not_a_number(completion, answer):
    return "1.0"


def nan(completion, answer):
    return float("nan")
'''


@pytest.fixture
def user_rewards(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(USER_REWARD)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("my_rewards", None)


def test_a_users_reward_from_an_import_path_is_used_with_its_parameters(user_rewards):
    spec = load_spec(SPEC, {"grpo.reward": {"name": "my_rewards:close_enough", "tolerance": 1}})
    name, fn = grpo_rewards.build(spec.grpo["reward"])
    assert grpo_rewards.score(fn, name, ["41", "44", "x"], ["42", "42", "42"], [0, 1, 2]) == [1.0, 0.0, 0.0]
    with pytest.raises(SpecError, match="must be fn"):
        load_spec(SPEC, {"grpo.reward": {"name": "my_rewards:close_enough", "tolerans": 1}})


@pytest.mark.parametrize("name, message", [
    ("my_rewards:broken", r"reward plug-in 'my_rewards:broken' raised KeyError: 'no such field' on prompt index 2"),
    ("my_rewards:not_a_number", r"'my_rewards:not_a_number' returned '1\.0' for prompt index 0 .*finite number"),
    ("my_rewards:nan", r"'my_rewards:nan' returned nan for prompt index 0 .*finite number"),
])
def test_a_reward_that_fails_names_the_prompt_index_and_the_plug_in(user_rewards, name, message):
    name, fn = grpo_rewards.build(name)
    with pytest.raises(grpo_rewards.RewardError, match=message):
        grpo_rewards.score(fn, name, ["1", "2", "3"], ["1", "2", "3"], [2, 2, 2] if "broken" in name else [0, 0, 0])

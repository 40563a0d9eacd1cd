"""The multi-turn environment contract (suite/workloads/agentic/env.py): a rollout records every turn (actions,
observations, tokens, tool seconds, reasons); the GRPO loss gets no gradient from any tool-output token; the
one-turn case is the existing single-turn GRPO (a reward plug-in scoring one completion)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from suite.algorithms import grpo, grpo_loss, grpo_rewards
from suite.data.rl.bugfix_repos import Config as RepoConfig
from suite.data.rl.bugfix_repos import load as load_repos
from suite.models.common.generation import Sampling, generate, token_logprobs
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama
from suite.workloads.agentic.env import SingleTurn, StepResult, rollout

torch.set_num_threads(1)
TOK = load_repos(RepoConfig(eval_tasks=1))  # the character tokenizer of the CPU tier


def _policy(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = llama_config.Config(n_layer=2, d_model=32, n_head=4, n_kv_head=2, ffn_dim=64, seq_len=96)
    return llama.build(cfg, {"vocab_size": TOK.vocab_size})


class Echo:
    """A scripted tool: every action is answered with a fixed tool output; the episode ends after `turns`."""

    def __init__(self, turns: int, observation: str = "out 123\n"):
        self.turns, self.observation, self.n = turns, observation, 0

    def reset(self) -> str:
        self.n = 0
        return "fix m.py\n"

    def step(self, action: str) -> StepResult:
        self.n += 1
        return StepResult(self.observation, self.n >= self.turns, "echo", 0.25, "ok")

    def reward(self) -> float:
        return float(self.n)

    def close(self) -> None:
        pass


def _rollout(policy, envs, max_turns=3, seed=0):
    s = Sampling(temperature=1.0, max_new_tokens=6, stop_tokens=TOK.stop_ids)
    return rollout(policy, envs, TOK, s, torch.Generator().manual_seed(seed), max_turns, 96)


def test_a_rollout_records_turns_tokens_and_tool_time():
    ro = _rollout(_policy(), [Echo(2), Echo(5)], max_turns=3)
    short, long_ = ro.trajectories
    assert [len(short.turns), len(long_.turns)] == [2, 3]
    assert (short.end, long_.end) == ("done", "max_turns")
    assert short.tool_s == 0.5 and long_.tool_tokens == 3 * len("out 123\n")
    assert ro.rewards.tolist() == [2.0, 3.0]
    for i, tr in enumerate(ro.trajectories):  # the mask covers exactly the policy's tokens, in order
        assert int(ro.mask[i].sum()) == tr.policy_tokens
        assert tr.record()["turns"] == len(tr.turns) and tr.record()["reasons"] == ["ok"] * len(tr.turns)
        body = ro.sequences[i, ro.prompt_len :].tolist()
        pos = 0
        for turn in tr.turns:
            pos += turn.action_tokens
            assert TOK.decode(body[pos : pos + turn.observation_tokens]) == turn.observation
            assert ro.mask[i, pos : pos + turn.observation_tokens].sum() == 0
            pos += turn.observation_tokens


def test_the_loss_gets_no_gradient_from_tool_output_tokens():
    policy = _policy(1)
    ro = _rollout(policy, [Echo(3), Echo(3), Echo(2), Echo(2)], max_turns=3, seed=1)
    tool_positions = (ro.mask == 0) & (ro.sequences[:, ro.prompt_len :] != TOK.pad_id)
    assert int(tool_positions.sum()) >= 4 * 2 * len("out 123\n")  # there are tool tokens to mask
    p, seqs = ro.prompt_len, ro.sequences
    keys = torch.cat((ro.prompt_mask, torch.ones_like(seqs[:, p:], dtype=torch.bool)), 1)[:, :-1]
    logits = policy(seqs[:, :-1], keys=keys)
    logits.retain_grad()
    logp = torch.log_softmax(logits[:, p - 1 :].float(), -1).gather(-1, seqs[:, p:, None])[..., 0]
    assert torch.allclose(logp, token_logprobs(policy, seqs, p, 1.0, ro.prompt_mask), atol=1e-6)
    cfg = grpo.Config(group_size=2)
    adv = grpo_loss.group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), 2)
    loss, _ = grpo_loss.policy_loss(logp, ro.logprobs, adv, ro.mask, cfg)
    loss.backward()
    grad = logits.grad[:, p - 1 :]  # row j predicts body token j
    assert grad[tool_positions].abs().max() == 0  # no tool-output token is ever a target
    assert grad[ro.mask == 1].abs().sum() > 0  # the policy's own tokens are
    # and the loss's value does not move whatever the tool tokens' log-probabilities are
    noisy = logp.detach() + torch.randn_like(logp) * tool_positions
    again, _ = grpo_loss.policy_loss(noisy, ro.logprobs + torch.randn_like(logp) * tool_positions, adv, ro.mask, cfg)
    assert float(again) == float(loss.detach())


def test_the_sampler_log_probs_are_the_updates_old_log_probs_across_turns():
    policy = _policy(2)
    ro = _rollout(policy, [Echo(3), Echo(1), Echo(2)], max_turns=3, seed=2)
    recomputed = token_logprobs(policy, ro.sequences, ro.prompt_len, 1.0, ro.prompt_mask)
    # left padding per turn (generation) and right padding (the update) give the same log-probs
    assert torch.allclose(recomputed * ro.mask, ro.logprobs, atol=1e-4)


def test_the_single_turn_case_is_the_existing_reward_plug_in():
    policy = _policy(3)
    answers = ["12", "7", "fix", "cat"]
    envs = [SingleTurn("fix m.py\n", a, grpo_rewards.exact_match) for a in answers]
    s = Sampling(temperature=1.0, max_new_tokens=4, stop_tokens=TOK.stop_ids)
    ro = rollout(policy, envs, TOK, s, torch.Generator().manual_seed(3), 1, 96)
    # the same tokens as one call of the single-turn sampler with the same generator
    prompts = torch.tensor([TOK.encode("fix m.py\n")] * 4)
    out = generate(policy, prompts, s, torch.Generator().manual_seed(3), pad_id=TOK.pad_id,
                   prompt_mask=torch.ones_like(prompts, dtype=torch.bool))
    width = out.completion.shape[1]
    assert torch.equal(ro.sequences[:, ro.prompt_len : ro.prompt_len + width] * out.mask.long(),
                       out.completion * out.mask.long())
    assert torch.equal(ro.mask[:, :width], out.mask)
    texts = [TOK.decode([t for t in row.tolist() if t not in TOK.stop_ids]) for row in out.completion]
    assert ro.rewards.tolist() == grpo_rewards.score(grpo_rewards.exact_match, "exact_match", texts, answers,
                                                     list(range(4)))
    assert all(len(tr.turns) == 1 and tr.end == "done" for tr in ro.trajectories)
    # a completion that matches scores 1: the plug-in really is what scores the episode
    env = SingleTurn("p", "ab", grpo_rewards.exact_match)
    env.reset()
    env.step("ab")
    assert env.reward() == 1.0 and F is not None


def test_tools_run_in_threads_give_the_same_batch():
    from suite.workloads.agentic.bugfix import BugFixEnv
    from suite.workloads.agentic.sandbox import Limits

    repos = load_repos(RepoConfig(eval_tasks=3))
    policy = _policy(4)
    s = Sampling(temperature=1.0, max_new_tokens=6, stop_tokens=TOK.stop_ids)
    outs = []
    for workers in (1, 3):
        envs = [BugFixEnv(t, Limits(wall_s=30)) for t in repos.held_out] + [Echo(2)]
        outs.append(rollout(policy, envs, TOK, s, torch.Generator().manual_seed(4), 3, 96, workers))
    a, b = outs
    assert torch.equal(a.sequences, b.sequences) and torch.equal(a.mask, b.mask)
    assert a.rewards.tolist() == b.rewards.tolist()
    assert [t.record()["reasons"] for t in a.trajectories] == [t.record()["reasons"] for t in b.trajectories]

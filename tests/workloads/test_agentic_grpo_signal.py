"""What task agentic_grpo's update learns from (checked while diagnosing why rl/agentic_bugfix_grpo does not lift its
warm start, docs/grpo.md): the old log-probabilities the update's ratio divides by are the sampler's own, at the
rollout's temperature (not 1), and the tokens the loss counts are exactly the policy's actions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from suite.models.common.generation import token_logprobs
from suite.specload import load_spec
from suite.workloads.agentic.env import rollout
from suite.workloads.agentic.task import AgenticGRPO
from suite.workloads.contract import Context

torch.set_num_threads(1)
SPEC = Path(__file__).resolve().parents[2] / "workloads" / "rl" / "agentic_bugfix_grpo.yaml"


def test_old_log_probs_are_the_samplers_at_the_rollout_temperature_and_the_mask_is_the_actions():
    spec = load_spec(SPEC, {"grpo.warm_start.sft_steps": 3, "data.batch_size": 2, "grpo.group_size": 2,
                            "data.eval_tasks": 2, "grpo.rollout.temperature": 0.7})
    w = AgenticGRPO(spec, Context(Path("/tmp"), 3, torch.device("cpu")))
    model = w.build_model().eval()
    w.attach(model)
    batch = w.make_batch(model, 3, 0)
    # the same rollout again (make_batch seeds tasks and sampling by (seed, step) only), keeping the sampler's log-probs
    tasks = w.repos.draw(np.random.default_rng([3, 0, 0xA6E7]), 2)
    ro = rollout(model, w._envs(tasks, 2), w.repos, w.sampling, torch.Generator().manual_seed(3 * 1_000_003),
                 w.repos.cfg.max_turns, w.context, w.repos.cfg.tool_workers)
    assert torch.equal(ro.sequences, batch["sequences"])
    mask = batch["mask"].bool()
    assert int(mask.sum()) > 0
    assert torch.allclose(batch["old_logp"][mask], ro.logprobs[mask], atol=1e-5)
    # the check can fail: the same tokens scored at temperature 1 are other log-probabilities
    at_one = token_logprobs(model, batch["sequences"], batch["prompt_mask"].shape[1], 1.0, batch["prompt_mask"])
    assert (at_one[mask] - ro.logprobs[mask]).abs().max() > 1e-2
    # every token the loss counts is one the policy wrote: the masked tokens spell the episode's actions
    body = batch["sequences"][:, batch["prompt_mask"].shape[1]:]
    for i, tr in enumerate(ro.trajectories):
        counted = w.repos.decode(body[i][mask[i]].tolist())
        assert counted.replace("\n", "") == "".join(t.action for t in tr.turns)
        assert len(counted) <= sum(t.action_tokens for t in tr.turns)  # no observation character among them


def test_lazy_demonstrations_read_and_submit_and_leave_the_default_warm_start_as_it_was():
    from suite.data.rl.bugfix_repos import PROMPT, Config, load

    repos = load(Config(lazy_demos=0.5))
    task = repos.held_out[0]
    expert = repos.expert_ids(task)
    rng = np.random.default_rng(5)
    demos = [repos.demo_ids(task, rng) for _ in range(400)]
    lazy = [d for d in demos if d != expert]
    assert 150 < len(lazy) < 250  # about half
    ids, mask = lazy[0]
    actions = repos.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert repos.decode(ids).startswith(PROMPT) and actions == "cat\nsubmit\n"
    assert len(ids) == len(expert[0])  # padded: a supervised batch of both kinds stacks
    # lazy_demos 0 (the default) draws nothing from the generator: the warm start's data is the one before
    plain, rng = load(Config()), np.random.default_rng(5)
    assert plain.demo_ids(task, rng) == expert and rng.random() == np.random.default_rng(5).random()


@pytest.mark.slow
def test_the_warm_start_alone_is_below_the_target():
    """The negative control of the target (docs/grpo.md): a run whose updates change nothing (learning rate 0, which
    the spec refuses, or no RL phase) keeps the warm start's pass@k at every evaluation (evaluation samples with a
    fixed generator), and that is well below the target: only the GRPO phase can reach it."""
    from suite.specload import load_spec as load

    spec = load(SPEC)
    w = AgenticGRPO(spec, Context(Path("/tmp"), 0, torch.device("cpu")))
    model = w.build_model().eval()
    first = w.evaluate(model)["pass_at_k"]
    assert first <= spec.target.value - 0.1, (first, spec.target.value)
    assert w.evaluate(model)["pass_at_k"] == first  # the same policy scores the same: no drift to the target

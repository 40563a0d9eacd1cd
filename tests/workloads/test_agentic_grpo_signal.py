"""What task agentic_grpo's update learns from (checked while diagnosing why rl/agentic_bugfix_grpo does not lift its
warm start, docs/grpo.md): the old log-probabilities the update's ratio divides by are the sampler's own, at the
rollout's temperature (not 1), and the tokens the loss counts are exactly the policy's actions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
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

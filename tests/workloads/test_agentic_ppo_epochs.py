"""Task agentic_grpo's `ppo_epochs` and `minibatches` (veRL's ppo_epochs, ppo_mini_batch_size): a rollout of
batch_size x minibatches tasks is trained on for ppo_epochs passes, each a shuffle of its task groups split into
`minibatches` updates against the rollout's own old log-probs; a rollout's weights are as old as the rollouts (not
the updates) before it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch

from suite.specload import load_spec
from suite.workloads.agentic.task import AgenticGRPO
from suite.workloads.contract import Context

torch.set_num_threads(1)
SPEC = Path(__file__).resolve().parents[2] / "workloads" / "rl" / "agentic_bugfix_grpo.yaml"
TINY = {"grpo.warm_start.sft_steps": 3, "data.batch_size": 2, "grpo.group_size": 2, "data.eval_tasks": 2,
        "grpo.rollout.max_new_tokens": 6, "data.max_turns": 2}


def _workload(over: dict) -> tuple[AgenticGRPO, torch.nn.Module]:
    w = AgenticGRPO(load_spec(SPEC, {**TINY, **over}), Context(Path("/tmp"), 3, torch.device("cpu")))
    model = w.build_model()
    w.attach(model)
    return w, model


def _rows(*batches: dict) -> Counter:
    return Counter(tuple(r.tolist()) for b in batches for r in b["sequences"])


def test_each_epoch_covers_the_rollout_in_minibatches_of_whole_groups():
    w, model = _workload({"grpo.ppo_epochs": 2, "grpo.minibatches": 2})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    it = w.train_batches(0, 1)
    parts = []
    for _ in range(4):
        batch = next(it)
        parts.append(batch)
        opt.zero_grad()
        w.loss(model, batch).backward()
        opt.step()
    assert w.clock.rollouts == 1 and w.clock.updates == 3  # the 4th update is the harness's, not yet done
    for b in parts:  # 2 tasks x G 2, each group whole: its advantages sum to 0
        assert b["sequences"].shape[0] == 4
        assert torch.allclose(b["advantages"].view(2, 2).sum(1), torch.zeros(2), atol=1e-5)
    epoch1, epoch2 = _rows(*parts[:2]), _rows(*parts[2:])
    assert sum(epoch1.values()) == 8 and epoch1 == epoch2  # each epoch: the whole rollout once
    # the old log-probs are the rollout's, whatever updates came between
    first = {tuple(s.tolist()): o for b in parts[:2] for s, o in zip(b["sequences"], b["old_logp"], strict=True)}
    for b in parts[2:]:
        for s, o in zip(b["sequences"], b["old_logp"], strict=True):
            assert torch.equal(first[tuple(s.tolist())], o)
    next(it)  # the next rollout, from the weights after all four updates
    assert w.clock.rollouts == 2 and w.clock.versions == [0, 1]
    it.close()


def test_one_step_off_policy_with_epochs_lags_one_rollout_not_its_updates():
    w, model = _workload({"grpo.ppo_epochs": 3, "grpo.rollout_mode": "async", "grpo.staleness": 1})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    it = w.train_batches(0, 1)
    for _ in range(7):  # rollouts 0, 1 and the first update of 2
        batch = next(it)
        opt.zero_grad()
        w.loss(model, batch).backward()
        opt.step()
    it.close()
    report = w.clock.report()
    assert report["updates_per_rollout"] == 3
    assert w.clock.versions[:3] == [0, 0, 1] and report["max_staleness"] == 1

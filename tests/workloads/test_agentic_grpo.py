"""Task agentic_grpo (suite/workloads/agentic/task.py): asynchronous GRPO at staleness 0 gives the very batches
and updates of the synchronous path (and staleness 1 does not: its second rollout is one update behind); the
overlap of generation with the update is recorded; a tiny run through the real harness records the phases,
the episodes' turns and the sandbox's enforcement."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from suite import harness
from suite.specload import load_spec
from suite.workloads.agentic.bugfix import BugFixEnv
from suite.workloads.agentic.task import AgenticGRPO
from suite.workloads.contract import Context

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "workloads" / "rl" / "agentic_bugfix_grpo.yaml"
TINY = {"grpo.warm_start.sft_steps": 3, "data.batch_size": 2, "grpo.group_size": 2, "data.eval_tasks": 2,
        "grpo.rollout.max_new_tokens": 6, "grpo.ppo_epochs": 1}  # one update a rollout (the spec has 4)


def _updates(overrides: dict, steps: int = 3, monkeypatch=None):
    spec = load_spec(SPEC, {**TINY, **overrides})
    w = AgenticGRPO(spec, Context(Path("/tmp"), 7, torch.device("cpu")))
    model = w.build_model()
    w.attach(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)  # large steps: a stale rollout would show
    batches = []
    it = w.train_batches(0, 1)
    for _ in range(steps):
        batch = next(it)
        batches.append(batch)
        opt.zero_grad()
        w.loss(model, batch).backward()
        opt.step()
    it.close()
    return w, batches, model.state_dict()


def test_staleness_0_gives_the_synchronous_update_and_1_does_not(monkeypatch):
    # a warm start of 3 steps solves nothing: reward the episodes (after the real grading run) by the parity of
    # the characters they typed, so that groups differ and every update moves the weights
    step, graded = BugFixEnv.step, BugFixEnv.reward

    def counting_step(self, action):
        self.typed = getattr(self, "typed", 0) + len(action)
        return step(self, action)

    monkeypatch.setattr(BugFixEnv, "step", counting_step)
    monkeypatch.setattr(BugFixEnv, "reward", lambda self: (graded(self), float(getattr(self, "typed", 0) % 2))[1])
    _, sync_batches, sync_state = _updates({"grpo.rollout_mode": "sync"})
    assert any(b["advantages"].abs().sum() > 0 for b in sync_batches)
    w, async_batches, async_state = _updates({"grpo.rollout_mode": "async", "grpo.staleness": 0})
    for a, b in zip(sync_batches, async_batches, strict=True):
        for key in ("sequences", "mask", "old_logp", "advantages"):
            assert torch.equal(a[key], b[key]), key
    assert all(torch.equal(sync_state[k], async_state[k]) for k in sync_state)
    assert w.clock.report()["seconds"]["weight_sync"] > 0
    w1, stale_batches, _ = _updates({"grpo.rollout_mode": "async", "grpo.staleness": 1})
    assert torch.equal(stale_batches[0]["old_logp"], sync_batches[0]["old_logp"])  # both from the warm start
    # rollout 2 came from the weights before update 1: another policy than the one sync's rollout 2 used
    assert not torch.equal(stale_batches[1]["old_logp"], sync_batches[1]["old_logp"])
    assert w1.clock.versions[:3] == [0, 0, 1] and w.clock.versions[:3] == [0, 1, 2]
    assert w1.clock.report()["max_staleness"] == 1 and w.clock.report()["max_staleness"] == 0
    assert w1.clock.overlap_s() > 0  # rollout k+1 was generating while update k ran
    assert w.clock.overlap_s() == 0  # on-policy: the next rollout waits for the update


def test_a_sync_rollout_mode_with_staleness_is_refused():
    with pytest.raises(Exception, match="staleness 1 needs rollout_mode: async"):
        load_spec(SPEC, {"grpo.staleness": 1})


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_tiny_run_through_the_harness_records_phases_and_episodes(mode):
    spec = load_spec(SPEC, {**TINY, "budget.max_steps": 3, "eval.every_steps": 2, "grpo.rollout_mode": mode,
                            "grpo.staleness": int(mode == "async")})
    result, _ = harness.run(harness.RunRequest(spec=spec, results_dir=None, threads=1, measure_peak=False))
    assert result.status == "budget", result.error
    ph = result.phases
    for name in ("gen", "tool", "reward", "old_log_prob", "update"):
        assert ph["seconds"][name] > 0, name
    assert ph["episodes"] >= 3 * 2 * 2 and ph["mean_turns"] >= 1 and ph["tokens_tool"] > 0
    assert ph["sandbox"]["cpu"].startswith("enforced") and ph["staleness"] == int(mode == "async")
    assert {p.metrics.get("pass_at_k") is not None for p in result.eval_curve} == {True}
    # what is recorded holds counts and reasons, never a tool's output or a sandbox's path
    recorded = result.model_dump_json()
    assert "tb-sandbox" not in recorded and "Traceback" not in recorded and "fail " not in recorded


def test_a_bad_agentic_block_names_its_field():
    from suite.spec import SpecError

    with pytest.raises(SpecError, match="grpo.staleness"):
        load_spec(SPEC, {"grpo.rollout_mode": "async", "grpo.staleness": 2})
    with pytest.raises(SpecError, match="grpo.tool_wrkers"):
        load_spec(SPEC, {"grpo.tool_wrkers": 2})

"""Task agentic_grpo under `placement: ray` (suite/workloads/agentic/ray_rollout.py) on a local Ray cluster: one
rollout actor gives the very batch (episodes, rewards, old log-probs) the colocated placement gives; two actors
with one-step-off-policy rollouts train through the real harness, their weights synced through Ray's object store
and their generation overlapping the updates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from suite import harness
from suite.specload import load_spec
from suite.workloads.agentic.task import AgenticGRPO
from suite.workloads.contract import Context

ray = pytest.importorskip("ray")
torch.set_num_threads(1)
SPEC = Path(__file__).resolve().parents[2] / "workloads" / "rl" / "agentic_bugfix_grpo.yaml"
TINY = {"grpo.warm_start.sft_steps": 20, "data.batch_size": 2, "grpo.group_size": 2, "data.eval_tasks": 2,
        "grpo.rollout.max_new_tokens": 8, "grpo.ppo_epochs": 1}


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(SPEC.parents[2]), "OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()


def _first_batch(over: dict) -> dict:
    w = AgenticGRPO(load_spec(SPEC, {**TINY, **over}), Context(Path("/tmp"), 5, torch.device("cpu")))
    w.attach(w.build_model())
    it = w.train_batches(0, 1)
    batch = next(it)
    it.close()
    return batch


def test_one_actor_gives_the_colocated_batch(cluster):
    local = _first_batch({})
    remote = _first_batch({"grpo.placement": "ray", "grpo.rollout_workers": 1})
    for key in ("sequences", "prompt_mask", "mask", "rewards", "advantages"):
        assert torch.equal(local[key], remote[key]), key
    torch.testing.assert_close(local["old_logp"], remote["old_logp"])


@pytest.mark.slow
def test_async_grpo_trains_with_two_ray_actors_through_the_harness(cluster, tmp_path):
    spec = load_spec(SPEC, {**TINY, "grpo.placement": "ray", "grpo.rollout_workers": 2, "grpo.rollout_mode": "async",
                            "grpo.staleness": 1, "data.batch_size": 4, "budget.max_steps": 4,
                            "eval.every_steps": 2}, "tiny")
    result, _ = harness.run(harness.RunRequest(spec=spec, results_dir=tmp_path, threads=1, measure_peak=False))
    assert result.status == "budget", result.error
    ph = result.phases
    assert ph["placement"] == "ray" and ph["rollout_workers"] == 2 and ph["staleness"] == 1
    # the clock counts an update when the harness asks for the next batch: the last one is the harness's alone
    assert ph["max_staleness"] == 1 and ph["updates"] == result.steps - 1 == 3 and ph["episodes"] >= 3 * 4 * 2
    assert ph["seconds"]["weight_sync"] > 0 and ph["seconds"]["gen"] > 0 and ph["tool_reasons"]
    assert ph["overlap_s"] > 0  # the actors generated rollout k+1 while update k ran

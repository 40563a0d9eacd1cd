"""PPO under a wrapping backend: the policy's own methods (distribution, obs_norm) are reached through DeepSpeed's
engine, every parameter is read inside forward (ZeRO-3 gathers only there), and the observation statistics stay
fp32 when a backend casts the model to bf16. Regression for `'_EvalView' object has no attribute 'obs_norm'`."""

from __future__ import annotations

import pytest
import torch
from support.backend_util import json_rows, trainbench
from support.promised import require

from suite.models.rl.ppo_mlp import ActorCritic, Config, ObsNorm
from suite.results.record import read_result
from suite.workloads.ppo import _unwrap

torch.set_num_threads(1)
META = {"obs_dim": 4, "n_actions": 3, "continuous": True}


def test_every_parameter_is_read_inside_forward():
    """A sharding wrapper gathers parameters for forward only: log_std must reach the loss through forward's output."""
    net = ActorCritic(Config(hidden=[8]), META)
    head, value = net(torch.randn(5, 4))
    dist = net.distribution(head.detach().requires_grad_())  # a head cut off from the model: no path to log_std
    dist.log_prob(torch.zeros(5, 3)).sum().backward()
    assert net.log_std.grad is None
    head, value = net(torch.randn(5, 4))
    (net.distribution(head).log_prob(torch.zeros(5, 3)).sum() + value.sum()).backward()
    assert all(p.grad is not None for p in net.parameters()), [n for n, p in net.named_parameters() if p.grad is None]
    assert net.greedy(head).shape == (5, 3)
    assert torch.allclose(net.distribution(head).stddev, net.log_std.exp().expand(5, 3))


def test_observation_statistics_stay_fp32_in_a_bf16_model():
    norm = ObsNorm(3)
    for _ in range(300):  # a bf16 count would stop at 256
        norm.update(torch.randn(1, 3))
    norm.bfloat16()
    assert {b.dtype for b in norm.buffers()} == {torch.float32}
    assert norm.count.item() == pytest.approx(300, abs=1e-3)
    norm.update(torch.randn(2, 3))
    assert norm.count.item() == pytest.approx(302, abs=1e-3)
    assert norm(torch.randn(2, 3, dtype=torch.bfloat16)).dtype == torch.bfloat16  # the next layer's dtype


def test_unwrap_reaches_the_policy_through_wrappers():
    net = ActorCritic(Config(hidden=[8]), META)

    class Engine(torch.nn.Module):  # DDP and DeepSpeed's engine both keep the model as `.module`
        def __init__(self, module: torch.nn.Module):
            super().__init__()
            self.module = module

    class View(torch.nn.Module):  # the DeepSpeed backend's eval view: `.module` is a property onto its engine
        def __init__(self, engine: torch.nn.Module):
            super().__init__()
            self.engine = engine

        @property
        def module(self) -> torch.nn.Module:
            return self.engine.module

    assert _unwrap(View(Engine(net))) is net
    assert _unwrap(Engine(net)) is net and _unwrap(net) is net


def _run_tiny(tmp_path, *extra: str) -> None:
    require("deepspeed")
    require("mujoco")
    p = trainbench("run", "rl/halfcheetah_ppo", "--variant", "tiny", "--backend", "deepspeed", "--threads", "1",
                   *extra, "--results", str(tmp_path), "--json", "--quiet")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    [row] = json_rows(p.stdout)
    assert row["status"] == "budget" and row["steps"] == 4, row
    result = read_result(next(tmp_path.rglob("*.json")))
    assert result.backend == "deepspeed" and len(result.eval_curve) == 2  # evaluated at steps 2 and 4
    assert all(abs(e.metrics["mean_return"]) < 1e6 for e in result.eval_curve)


def test_halfcheetah_tiny_trains_under_deepspeed(tmp_path):
    _run_tiny(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("extra", [("--set", "backends.deepspeed.zero_stage=3"),
                                   ("--precision", "bf16", "--set", "backends.deepspeed.zero_stage=3")],
                         ids=["zero3", "zero3-bf16"])
def test_halfcheetah_tiny_trains_under_deepspeed_zero3(tmp_path, extra):
    _run_tiny(tmp_path, *extra)

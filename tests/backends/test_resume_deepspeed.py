"""Issue 48 point 2 for DeepSpeed: `--checkpoint-every` saves with the engine's own `save_checkpoint` (module, optimizer
and ZeRO partitions, the lr scheduler), and a run killed at step k and restarted from it trains on exactly as the
uninterrupted run (every loss, every evaluation, the final weights: bit-exact on CPU). A restore that leaves the
optimizer's state out (DeepSpeed's own `load_optimizer_states=False`) is caught.

In one process, the kill raising instead of SIGKILL (as tests/harness/test_resume.py); the DeepSpeed engine keeps the
process group it opened, as every in-process DeepSpeed test here does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.engine_resume import EngineRecipe
from support.promised import require

from suite import harness
from suite.backends.deepspeed.backend import DeepSpeedBackend

pytestmark = pytest.mark.slow  # three real runs of the engine (~1 min at load 10-25)
require("deepspeed")

DIGITS = Path(__file__).resolve().parents[2] / "workloads" / "cv" / "digits_cnn.yaml"
# dropout draws from the RNG every step, a cosine schedule moves the lr, AdamW keeps moments, ZeRO-1 partitions them
RECIPE = {"model.dropout": 0.2, "schedule.name": "cosine", "checkpoint.every_steps": 10,
          "backends.deepspeed.zero_stage": 1}


def _weights(the_run: harness.Run) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in the_run.train_state.raw_model.state_dict().items()}


ENGINE = EngineRecipe(DIGITS, "deepspeed", RECIPE, variant="tiny")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return ENGINE.whole_and_killed(tmp_path_factory.mktemp("resume_ds"))


def _resume(runs, monkeypatch, name: str) -> harness.Run:
    return ENGINE.resume(runs[0], monkeypatch, name)


def test_a_resumed_deepspeed_run_equals_the_uninterrupted_run_bit_for_bit(runs, monkeypatch):
    tmp, whole, killed = runs
    assert whole.status == "budget" and whole.steps == 40
    assert killed.status == "error" and "killed" in killed.error and killed.steps == 25
    # DeepSpeed's own layout: its model-states file and ZeRO's optimizer partition, in the step's folder
    saved = {p.relative_to(tmp / "killed").as_posix() for p in (tmp / "killed").rglob("*.pt")}
    assert "step-000000020/engine/mp_rank_00_model_states.pt" in saved
    assert any(p.startswith("step-000000020/engine/") and "optim_states" in p for p in saved)
    resumed = _resume(runs, monkeypatch, "ok")
    assert resumed.status == "budget" and resumed.steps == 40
    assert resumed.losses == whole.losses  # every step's loss, exactly
    w1, w2 = _weights(whole), _weights(resumed)
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    assert [p.metrics for p in resumed.curve] == [p.metrics for p in whole.curve]
    r = resumed.result()
    (event,) = r.goodput.recovery["events"]
    assert event["restored_step"] == 20 and event["failed_at_step"] == 25 and r.goodput.recovery["steps_lost"] == 5
    ck = r.goodput.checkpoint
    assert ck["format"] == "deepspeed" and ck["asynchronous"] is False and ck["restored_from_step"] == 20
    assert ck["saves"] == 1 and ck["steps"] == [30] and ck["bytes"] > 0 and ck["blocking_s"][0] > 0
    parts = r.goodput.parts_s
    assert parts["checkpoint_restore_s"] > 0 and parts["checkpoint_save_s"] > 0
    assert sum(parts.values()) == pytest.approx(r.goodput.wall_s, rel=0.01)


def test_a_deepspeed_restore_without_the_optimizer_state_is_caught(runs, monkeypatch):
    _, whole, _ = runs

    def weights_and_scheduler_only(self, state, folder):
        state.model.load_checkpoint(str(folder), tag=self.CHECKPOINT_TAG, load_optimizer_states=False)

    monkeypatch.setattr(DeepSpeedBackend, "load_checkpoint", weights_and_scheduler_only)
    resumed = _resume(runs, monkeypatch, "no_optimizer")
    assert resumed.steps == 40
    assert resumed.losses[:20] == whole.losses[:20]  # restored from the checkpoint, as before
    assert resumed.losses[20:] != whole.losses[20:]  # then AdamW started its moments afresh

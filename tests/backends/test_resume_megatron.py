"""Issue 48 point 2 for Megatron: `--checkpoint-every` saves with Megatron's own dist_checkpointing (GPTModel's
sharded_state_dict, the optimizer sharded beside it by Megatron's optim_state_to_sharding_state), and a run killed at step k and restarted from it trains on
exactly as the uninterrupted run (every loss, every evaluation, the last after the final step: bit-exact on CPU). A restore that
leaves the optimizer's state out is caught.

In one process, the kill raising instead of SIGKILL (as tests/harness/test_resume.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.engine_resume import EngineRecipe
from support.promised import require

from suite import harness

pytestmark = pytest.mark.slow  # three real runs of the engine (~1 min at load 10-25)
require("megatron.core")

CHAR_GPT = Path(__file__).resolve().parents[1] / "support" / "specs" / "char_gpt.yaml"
# a cosine schedule moves the lr every step, AdamW keeps moments
RECIPE = {"schedule.name": "cosine", "budget.max_steps": 40, "eval.every_steps": 10, "checkpoint.every_steps": 10}


ENGINE = EngineRecipe(CHAR_GPT, "megatron", RECIPE)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return ENGINE.whole_and_killed(tmp_path_factory.mktemp("resume_megatron"))


def _resume(runs, monkeypatch, name: str) -> harness.Run:
    return ENGINE.resume(runs[0], monkeypatch, name)


def test_a_resumed_megatron_run_equals_the_uninterrupted_run_bit_for_bit(runs, monkeypatch):
    tmp, whole, killed = runs
    assert whole.status == "budget" and whole.steps == 40, whole.error
    assert killed.status == "error" and "killed" in killed.error and killed.steps == 25
    # Megatron's own layout: dist_checkpointing's metadata.json (torch_dist backend) inside the harness's step folder
    assert "torch_dist" in (tmp / "killed" / "step-000000020" / "megatron" / "metadata.json").read_text()
    resumed = _resume(runs, monkeypatch, "ok")
    assert resumed.status == "budget" and resumed.steps == 40
    assert resumed.losses == whole.losses  # every step's loss, exactly
    # the final weights through the evaluation after the last step
    assert [p.step for p in whole.curve][-1] == 40
    assert [p.metrics for p in resumed.curve] == [p.metrics for p in whole.curve]
    r = resumed.result()
    (event,) = r.goodput.recovery["events"]
    assert event["restored_step"] == 20 and event["failed_at_step"] == 25 and r.goodput.recovery["steps_lost"] == 5
    ck = r.goodput.checkpoint
    assert ck["format"] == "megatron.dist_checkpointing" and ck["asynchronous"] is False and ck["restored_from_step"] == 20
    assert ck["saves"] == 1 and ck["steps"] == [30] and ck["bytes"] > 0
    parts = r.goodput.parts_s
    assert parts["checkpoint_restore_s"] > 0 and parts["checkpoint_save_s"] > 0
    assert sum(parts.values()) == pytest.approx(r.goodput.wall_s, rel=0.01)


def test_a_megatron_restore_without_the_optimizer_state_is_caught(runs, monkeypatch):
    _, whole, _ = runs
    monkeypatch.setattr(torch.optim.AdamW, "load_state_dict", lambda self, sd: None)
    resumed = _resume(runs, monkeypatch, "no_optimizer")
    assert resumed.steps == 40
    assert resumed.losses[:20] == whole.losses[:20]  # restored from the checkpoint, as before
    assert resumed.losses[20:] != whole.losses[20:]  # then AdamW started its moments afresh

"""Issue 48 point 2 for torchtitan: `--checkpoint-every` saves with torchtitan's own CheckpointManager (DCP, its
ModelWrapper's flattened state, its `step-N` folders), and a run killed at step k and restarted from it trains on
exactly as the uninterrupted run (every loss, every evaluation, the last after the final step: bit-exact on CPU). A restore that
leaves the optimizer's state out is caught.

In one process, the kill raising instead of SIGKILL (as tests/harness/test_resume.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.engine_resume import EngineRecipe
from support.promised import require

from suite import harness
from suite.backends.torchtitan import checkpoint as titan_checkpoint

pytestmark = pytest.mark.slow  # three real runs of the engine (~1 min at load 10-25)
require("torchtitan.models.llama3", extra="torchtitan")

CHAR_LLAMA = Path(__file__).resolve().parents[1] / "support" / "specs" / "char_llama.yaml"
# a cosine schedule moves the lr every step, AdamW keeps moments
RECIPE = {"schedule.name": "cosine", "budget.max_steps": 40, "eval.every_steps": 10, "checkpoint.every_steps": 10}


ENGINE = EngineRecipe(CHAR_LLAMA, "torchtitan", RECIPE)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return ENGINE.whole_and_killed(tmp_path_factory.mktemp("resume_titan"))


def _resume(runs, monkeypatch, name: str) -> harness.Run:
    return ENGINE.resume(runs[0], monkeypatch, name)


def test_a_resumed_torchtitan_run_equals_the_uninterrupted_run_bit_for_bit(runs, monkeypatch):
    tmp, whole, killed = runs
    assert whole.status == "budget" and whole.steps == 40, whole.error
    assert killed.status == "error" and "killed" in killed.error and killed.steps == 25
    # torchtitan's own layout: its step-N folder with DCP's metadata, inside the harness's step folder
    assert (tmp / "killed" / "step-000000020" / "torchtitan" / "step-20" / ".metadata").is_file()
    resumed = _resume(runs, monkeypatch, "ok")
    assert resumed.status == "budget" and resumed.steps == 40
    assert resumed.losses == whole.losses  # every step's loss, exactly
    # the final weights through the evaluation after the last step (the model's DTensors need the process group
    # the backend closed, so they are not read directly)
    assert [p.step for p in whole.curve][-1] == 40
    assert [p.metrics for p in resumed.curve] == [p.metrics for p in whole.curve]
    r = resumed.result()
    (event,) = r.goodput.recovery["events"]
    assert event["restored_step"] == 20 and event["failed_at_step"] == 25 and r.goodput.recovery["steps_lost"] == 5
    ck = r.goodput.checkpoint
    assert ck["format"] == "torchtitan" and ck["asynchronous"] is False and ck["restored_from_step"] == 20
    assert ck["saves"] == 1 and ck["steps"] == [30] and ck["bytes"] > 0
    parts = r.goodput.parts_s
    assert parts["checkpoint_restore_s"] > 0 and parts["checkpoint_save_s"] > 0
    assert sum(parts.values()) == pytest.approx(r.goodput.wall_s, rel=0.01)


def test_a_torchtitan_restore_without_the_optimizer_state_is_caught(runs, monkeypatch):
    _, whole, _ = runs
    monkeypatch.setattr(titan_checkpoint._Optimizer, "load_state_dict", lambda self, sd: None)
    resumed = _resume(runs, monkeypatch, "no_optimizer")
    assert resumed.steps == 40
    assert resumed.losses[:20] == whole.losses[:20]  # restored from the checkpoint, as before
    assert resumed.losses[20:] != whole.losses[20:]  # then AdamW started its moments afresh

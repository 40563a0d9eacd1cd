"""The LLM smoke workload (a tiny Llama 3 decoder on CPython's pydoc text) reaches its target on the CPU, through
the harness, as the other smoke workloads do (docs/workloads.md has the 3-seed figures of it and of the standard
tier's dense and MoE Llama on Jane Austen)."""

from __future__ import annotations

import pytest

from suite import harness, registry
from suite.specload import load_spec


@pytest.mark.slow  # ~7 s quiet, 20-35 s on a loaded 2-core host
def test_llm_smoke_workload_reaches_its_target():
    spec = load_spec(registry.workload_files()["nlp/topics_llama"], overrides={"budget.max_train_s": 300})
    r, _ = harness.run(harness.RunRequest(spec=spec, results_dir=None, threads=1, seed=0))
    assert r.status == "reached", (r.status, r.final_metrics, r.error)
    assert r.final_metrics["val_loss"] <= spec.target.value
    assert r.steps_to_target and r.mfu and r.mfu > 0

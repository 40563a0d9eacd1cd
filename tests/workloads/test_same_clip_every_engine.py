"""One spec, the same training under every engine that runs it: the gradient clip a recipe declares per backend
(`backends.<engine>.grad_clip`: torch, npu, DeepSpeed, Megatron and torchtitan each read it from their own block)
must be declared, with the same value, for every engine the support matrix says runs the spec. A spec that clips
under torch and silently trains unclipped under torchtitan is two recipes with one name (found after torchtitan
learned DeepSeek-V3's and Flux's layouts: llama31_8b, gpt_oss_20b, deepseekv3_671b and flux1 had no clip there).

veRL is left out: its clip is veRL's own `actor.grad_clip` in the trainer overrides (suite/backends/verl/adapt.py),
not a `backends.verl` field."""

from __future__ import annotations

from suite import registry
from suite.backends import matrix

CLIPPING = ("torch", "npu", "deepspeed", "megatron", "torchtitan")


def _clips(spec, runs: set[str]) -> dict[str, float | None]:
    return {b: (spec.backends.get(b) or {}).get("grad_clip") for b in CLIPPING if b in runs}


def _disagreements(specs: dict) -> list[str]:
    table = matrix.matrix(specs, [b for b in CLIPPING if b in registry.BACKENDS])
    bad = []
    for name, spec in specs.items():
        runs = {b for b, why in table[name].items() if why is None}
        clips = _clips(spec, runs)
        if len(set(clips.values())) > 1:
            bad.append(f"{name}: {clips}")
    return bad


def test_every_engine_that_runs_a_spec_clips_it_alike():
    specs, problems = matrix.load_all(registry.workload_files(), schema_only=True)
    assert not problems
    assert len(specs) > 20
    clipped = [n for n, s in specs.items() if any((s.backends.get(b) or {}).get("grad_clip") for b in CLIPPING)]
    assert len(clipped) >= 8, clipped  # the check has specs to bite on
    assert _disagreements(specs) == []


def test_a_missing_clip_is_caught():
    """Negative control: drop torchtitan's clip from llama31_8b (which torchtitan runs) and the check names it."""
    specs, _ = matrix.load_all({"nlp/llama31_8b": registry.workload_files()["nlp/llama31_8b"]}, schema_only=True)
    spec = specs["nlp/llama31_8b"]
    backends = {k: v for k, v in spec.backends.items() if k != "torchtitan"}
    broken = spec.model_copy(update={"backends": backends})
    found = _disagreements({"nlp/llama31_8b": broken})
    assert len(found) == 1 and "'torchtitan': None" in found[0]

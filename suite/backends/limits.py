"""Why a support-matrix cell says no: a limit of the engine itself, or a part of the engine TrainBench does not wire.

A backend's `supports()` gives the reason in its own words (the field to change); this module says which kind of
"no" it is, so that `list --matrix --why` and `--json` never present a gap of TrainBench's as the engine's limit.
Engine limits name what the engine ships (read from its installed package: megatron-core 0.16.1, torchtitan 0.3.0,
veRL 0.9.1, DeepSpeed 0.19.8) or its upstream issue; everything else is "not wired", naming the part of the engine
that would hold it. Each engine's own `limit(spec)` lives in its options module (suite/backends/<engine>/options.py),
beside its `supports`. Pure: the spec is read, no framework is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

LM_ARCHS = ("gpt", "llama", "hf_llama")


@dataclass(frozen=True)
class Limit:
    kind: Literal["engine limit", "not wired"]
    why: str

    def describe(self) -> str:
        return f"{self.kind}: {self.why}"


def arch(spec: Any) -> str:
    return str(spec.model.arch)


def classify(backend: str, spec: Any) -> Limit:
    """The kind of a refusal of `backend` for `spec` (call it only for a refused cell): the engine's own `limit(spec)`
    from its options module (suite/backends/<engine>/options.py), or, for an engine that declares none, a gap of
    TrainBench's."""
    from suite import registry

    limit = registry.engine_attr(backend, "limit")
    if limit is not None:
        return limit(spec)
    return Limit("not wired", f"the {backend} backend is TrainBench's own: what it refuses is not implemented here")

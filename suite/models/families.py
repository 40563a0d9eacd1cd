"""The registry of Llama-class model families: one line per family, the package whose `FAMILY` (suite/models/family.py)
declares it. Adding a family is a folder `suite/models/<family>/` and one line here (docs/adding-a-family.md).

Everything family-specific is found through here: the Hugging Face architectures the loader reads
(`by_architecture`), the one written for a model (`for_traits`), the named shapes (`presets`, `tiny`).

May import what `suite.models` may (the family folders, lazily, by the module path on each line).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from suite.models.family import Family, traits_of

FAMILIES: dict[str, str] = {
    "llama": "suite.models.llama",
    "mixtral": "suite.models.mixtral",
    "qwen2": "suite.models.qwen2",
    "gpt_oss": "suite.models.gpt_oss",
    "deepseek_v3": "suite.models.deepseek_v3",
    "qwen35": "suite.models.qwen35",
    "qwen3": "suite.models.qwen3",
}


@functools.cache
def all_families() -> tuple[Family, ...]:
    """Every registered family, in the registry's order; checked: names match the lines, no architecture read by
    two, no two families that write config.json with the same traits."""
    out = []
    for name, module in FAMILIES.items():
        family = importlib.import_module(module).FAMILY
        if family.name != name:
            raise ValueError(f"{module}.FAMILY is named {family.name!r}, registered as {name!r}")
        out.append(family)
    seen: dict[str, str] = {}
    for f in out:
        for a in f.architectures:
            if a in seen:
                raise ValueError(f"architecture {a} is read by both {seen[a]} and {f.name}")
            seen[a] = f.name
    writers = [f for f in out if f.architectures]
    for i, f in enumerate(writers):
        for g in writers[i + 1:]:
            if f.has(g.traits):
                raise ValueError(f"families {f.name} and {g.name} declare the same traits {dict(f.traits)}")
    return tuple(out)


def architectures() -> dict[str, Family]:
    """Hugging Face architecture name -> the family that reads it."""
    return {a: f for f in all_families() for a in f.architectures}


def for_traits(cfg: Any) -> Family:
    """The family whose Hugging Face architecture a model of this config is saved as."""
    traits = traits_of(cfg)
    for f in all_families():
        if f.architectures and f.has(traits):
            return f
    on = [t for t, v in traits.items() if v] or ["none"]
    raise ValueError(f"no registered family's Hugging Face architecture has exactly the traits {', '.join(on)} "
                     f"(families: {', '.join(f'{f.name} {dict(f.traits)}' for f in all_families() if f.architectures)})")


@functools.cache
def presets() -> dict[str, dict[str, Any]]:
    """Every family's named shapes: the full-size ones in family order, then the CPU (`tiny`) ones."""
    tiny = {t for f in all_families() for t in f.tiny.values()}
    full = {n: dict(p) for f in all_families() for n, p in f.presets.items() if n not in tiny}
    small = {n: dict(p) for f in all_families() for n, p in f.presets.items() if n in tiny}
    clash = set(full) & set(small) or (len(full) + len(small) != sum(len(f.presets) for f in all_families()))
    if clash:
        raise ValueError("two families declare a preset of the same name")
    return {**full, **small}


@functools.cache
def tiny() -> dict[str, str]:
    return {k: v for f in all_families() for k, v in f.tiny.items()}

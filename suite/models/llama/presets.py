"""Named shapes for `model: {arch: llama, preset: NAME}`; fields given beside the preset override it.

Each family declares its own (`presets` and `tiny` of the `FAMILY` in suite/models/<family>/__init__.py, with the
sources and what the suite's decoder leaves out of each); this module is their union through the registry (suite/models/families.py):
`PRESETS` (the full-size shapes in registry order, then the CPU ones) and `TINY` (each full-size preset's CPU
counterpart: the tests' FLOPs and parity shapes, a spec's `tiny` variant).
"""

from __future__ import annotations

from typing import Any

from suite.models import families

PRESETS: dict[str, dict[str, Any]] = families.presets()
TINY: dict[str, str] = families.tiny()


def expand(data: Any) -> Any:
    """A Config's raw fields with its `preset` filled in underneath them (given fields win; `moe` and
    `rope_scaling` merge field by field)."""
    if not isinstance(data, dict) or data.get("preset") is None:
        return data
    name = data["preset"]
    if name not in PRESETS:
        raise ValueError(f"preset {name!r} is unknown; known: {', '.join(PRESETS)}")
    merged = {**PRESETS[name], **data}
    for nested in ("moe", "rope_scaling"):
        base, given = PRESETS[name].get(nested), data.get(nested)
        if isinstance(base, dict) and isinstance(given, dict):
            merged[nested] = {**base, **given}
    return merged

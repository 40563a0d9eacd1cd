"""A result's fields as table cells: `cell_text` (one value, bounded) and `flatten` (nested dicts to dotted keys), for
the run pages (moved from suite/site/data.py, which outgrew the module size limit)."""

from __future__ import annotations

import json
from typing import Any


def cell_text(value: Any, limit: int = 400) -> str:
    kind = type(value)
    if kind is str:
        text = value
    elif kind is float:
        text = f"{value:.6g}"
    elif value is None:
        text = "null"
    elif kind is bool:
        text = "true" if value else "false"
    elif kind is int:
        text = int.__repr__(value)  # what json.dumps writes for an int
    elif isinstance(value, str | float | bool | int):
        text = value if isinstance(value, str) else f"{value:.6g}" if isinstance(value, float) else json.dumps(value)
    else:
        text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def flatten(data: Any, prefix: str = "", depth: int = 0, out: dict[str, Any] | None = None) -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay values (they are shown as JSON)."""
    out = {} if out is None else out
    if isinstance(data, dict) and depth < 6 and data:
        for k, v in data.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), depth + 1, out)
    else:
        out[prefix or "value"] = data
    return out

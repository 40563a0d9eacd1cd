"""The comparison key: what must be equal, beyond hardware x workload x backend x spec hash, for two runs to be
compared at all. bf16 against fp32, compiled against eager, 1 process against 8, ZeRO-2 against ZeRO-3, a
throughput run against a time-to-target run: each measures something else, and compare says which field differs.
"""

from __future__ import annotations

import json
from typing import Any

# (field, what the user reads) in the order a mismatch is reported
FIELDS: tuple[tuple[str, str], ...] = (
    ("mode", "mode (tta | throughput)"),
    ("precision", "precision"),
    ("compile", "compile"),
    ("world_size", "process count"),
    ("parallel", "parallel layout"),
    ("backend_options", "backend options"),
    ("warmup_steps", "throughput warm-up steps"),
    ("clock", "throughput clock (wall | cpu)"),
)


def key_of(config: dict[str, Any] | None, *, backend: str, world_size: int, parallel: dict[str, Any] | None,
           mode: str | None = None) -> dict[str, Any]:
    """The key of one result, from its `config` (the harness's), world size and parallel layout."""
    config = config if isinstance(config, dict) else {}
    spec = config.get("spec") if isinstance(config.get("spec"), dict) else {}
    backends = spec.get("backends") if isinstance(spec.get("backends"), dict) else {}
    mode = mode or config.get("mode") or "tta"
    throughput = spec.get("throughput") if isinstance(spec.get("throughput"), dict) else {}
    return {
        "mode": mode,
        "precision": config.get("precision", "fp32"),
        "compile": bool(config.get("compile", False)),
        "world_size": int(world_size),
        "parallel": _canonical(parallel or {"dp": int(world_size)}),
        "backend_options": _canonical(backends.get(backend) or {}),
        "warmup_steps": throughput.get("warmup_steps") if mode == "throughput" else None,
        # only a non-default clock is written, so keys (and floor files) from before the field stay equal
        **({"clock": throughput["clock"]} if mode == "throughput" and throughput.get("clock", "wall") != "wall"
           else {}),
    }


def _canonical(value: Any) -> Any:
    """A JSON-stable form (sorted keys), so that equal layouts compare equal whatever their key order."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def differences(base: dict[str, Any], cand: dict[str, Any]) -> list[str]:
    """`precision: baseline fp32, candidate bf16`, one per differing field; empty when comparable."""
    out = []
    for name, label in FIELDS:
        b, c = base.get(name), cand.get(name)
        if b != c:
            out.append(f"{label} ({name}): baseline {_show(b)}, candidate {_show(c)}")
    return out


def mixed(keys: list[dict[str, Any]]) -> list[str]:
    """The fields on which the runs of ONE side disagree (a side must be one configuration)."""
    out = []
    for name, label in FIELDS:
        values = {json.dumps(k.get(name), sort_keys=True) for k in keys}
        if len(values) > 1:
            out.append(f"{label} ({name}): {', '.join(sorted(values))}")
    return out


def _show(v: Any) -> str:
    return json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else str(v)

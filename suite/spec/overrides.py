"""A spec's raw data with a variant and `--set` overrides applied, validated against the schema; each error blames
the file or the `--set` flag that caused it, e.g. `workloads/cv/digits_cnn.yaml: target.value: Input should be
greater than 0`."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ValidationError

from suite.spec.safe_yaml import _check_values, parse_yaml
from suite.spec.schema import SpecError, WorkloadSpec


def _format_pydantic(err: ValidationError, prefix: str = "") -> list[tuple[str, str]]:
    out = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        if prefix:
            loc = f"{prefix}.{loc}" if loc else prefix
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; `trainbench spec schema` lists the fields)"
        out.append((loc, msg))
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """`optimizer.lr=0.01` -> ("optimizer.lr", 0.01). The value is parsed as YAML (numbers, lists, bools)."""
    if "=" not in text:
        raise SpecError("--set", [(text, "expected KEY=VALUE, e.g. --set optimizer.lr=0.01")])
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or not all(p for p in key.split(".")):
        raise SpecError("--set", [(text, "the key must be a dotted field path, e.g. optimizer.lr")])
    value = parse_yaml(raw, f"--set {text}") if raw.strip() else ""
    return key, value


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any], source: str) -> dict[str, Any]:
    out = copy.deepcopy(data)
    for key, value in overrides.items():
        node: Any = out
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            nxt = node.get(part) if isinstance(node, dict) else None
            if nxt is None:
                nxt = {}
                node[part] = nxt
            if not isinstance(nxt, dict):
                raise SpecError(source, [(".".join(parts[: i + 1]), f"is a {type(nxt).__name__}, cannot set {key}")])
            node = nxt
        node[parts[-1]] = value
    return out


def merge_spec_data(data: dict[str, Any], source: str, overrides: dict[str, Any] | None = None,
                    variant: str | None = None) -> dict[str, Any]:
    """Raw spec data with a variant and --set overrides applied, not yet validated."""
    if not isinstance(data, dict):
        raise SpecError(source, [("", f"top level must be a mapping of fields, got {type(data).__name__}")])
    _check_values(data, source)
    if variant:
        variants = data.get("variants") or {}
        if not isinstance(variants, dict) or not all(isinstance(v, dict) for v in variants.values()):
            raise SpecError(source, [("variants", "must map each variant name to a mapping of `field.path: value`")])
        if variant not in variants:
            known = ", ".join(sorted(map(str, variants))) or "none"
            raise SpecError(source, [("variants", f"no variant {variant!r} (this spec has: {known})")])
        data = apply_overrides(data, dict(variants[variant]), f"{source} (variant {variant})")
    return apply_overrides(data, overrides, f"{source} (--set)") if overrides else data


def parse_spec(data: dict[str, Any], source: str, overrides: dict[str, Any] | None = None,
               variant: str | None = None) -> WorkloadSpec:
    """Raw spec data (plus a variant and --set overrides) against the schema only (suite.specload checks the rest)."""
    data = merge_spec_data(data, source, overrides, variant)
    try:
        spec = WorkloadSpec.model_validate(data)
    except ValidationError as e:
        raise SpecError(source, blame_overrides(_format_pydantic(e), overrides)) from None
    return spec


def blame_overrides(problems: list[tuple[str, str]], overrides: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Point at the --set flag when the bad value came from one, not at the file that was fine."""
    if not overrides:
        return problems
    out = []
    for loc, msg in problems:
        # the field itself, below it, or above it (`--set a.b.c=1` makes an unknown field `a`)
        hit = next((k for k in overrides if loc == k or loc.startswith((k + ".", k + "["))
                    or (loc and k.startswith(loc + "."))), None)
        out.append((loc, f"{msg} (from --set {hit}={overrides[hit]!r})" if hit else msg))
    return out


def json_schema() -> dict[str, Any]:
    return WorkloadSpec.model_json_schema()


def format_validation(err: ValidationError, prefix: str = "") -> list[tuple[str, str]]:
    """Public for components that validate their own blocks (model/data params)."""
    return _format_pydantic(err, prefix)

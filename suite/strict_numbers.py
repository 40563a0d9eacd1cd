"""Booleans are never numbers: pydantic's lax mode reads `true` as 1 and `false` as 0 for an int or float field, so
`--set budget.max_steps=true` ran one step (and YAML writes booleans for yes/no/on/off too). `bool_problems` walks
raw data against a pydantic model before it is validated: the spec's own blocks (suite/specload.py) and every
component's Config and backend Options (suite/registry.py).

May import: no other suite module.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

_UNIONS = (Union, types.UnionType, Annotated)


def _admits(annotation: Any, kinds: tuple[type, ...]) -> bool:
    """Whether a field's annotation takes a value of one of these types (through Optional, unions, Annotated)."""
    if annotation is Any:
        return True
    if isinstance(annotation, type):
        return issubclass(annotation, kinds)
    origin = get_origin(annotation)
    if origin is Literal:
        return any(isinstance(a, kinds) for a in get_args(annotation))
    if origin in _UNIONS:
        return any(_admits(a, kinds) for a in get_args(annotation))
    return False


def _number_only(annotation: Any) -> bool:
    return _admits(annotation, (int, float)) and not _admits(annotation, (bool,))


def _item_types(annotation: Any) -> list[Any]:
    """The item types of a list or tuple field (list[int], tuple[int, ...], Optional of them)."""
    origin = get_origin(annotation)
    if origin in (list, tuple, set, frozenset):
        return [a for a in get_args(annotation) if a is not Ellipsis]
    if origin in _UNIONS:
        return [t for a in get_args(annotation) for t in _item_types(a)]
    return []


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in _UNIONS:
        return [m for a in get_args(annotation) for m in _models_in(a)]
    return []


def bool_problems(model: type[BaseModel], data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Each place in `data` where `true`/`false` is given for a number field of `model` (nested models and lists
    of numbers included), as (field path, message)."""
    if not isinstance(data, dict):
        return []
    out: list[tuple[str, str]] = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key not in data:
            continue
        value, loc = data[key], f"{prefix}{key}"
        if isinstance(value, bool):
            if _number_only(info.annotation):
                out.append((loc, f"expected a number, got the boolean {str(value).lower()}"))
        elif isinstance(value, list | tuple):
            items = _item_types(info.annotation)
            out += [(f"{loc}[{i}]", f"expected a number, got the boolean {str(v).lower()}")
                    for i, v in enumerate(value) if isinstance(v, bool) and any(map(_number_only, items))]
        else:
            for sub in _models_in(info.annotation):
                out += bool_problems(sub, value, f"{loc}.")
    return out

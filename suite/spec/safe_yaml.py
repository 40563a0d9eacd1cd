"""The safe YAML reader of spec files: plain YAML only, no duplicate keys, bounded size and value count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from suite.spec.schema import MAX_SPEC_BYTES, MAX_SPEC_VALUES, SpecError


class _SafeLoader(yaml.SafeLoader):
    """SafeLoader that also refuses duplicate keys (a silent override is a bug in a benchmark spec)."""


def _construct_mapping(loader: _SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *defaults`: merged below; the keys written here may override merged ones
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, f"a mapping key must be a plain value, not a {type(key).__name__}", key_node.start_mark
            ) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    loader.flatten_mapping(node)  # type: ignore[no-untyped-call] - YAML merge keys, as SafeLoader does
    return loader.construct_mapping(node, deep=deep)


_SafeLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

if getattr(yaml, "__with_libyaml__", False):
    class _FastLoader(yaml.CSafeLoader):  # type: ignore[misc,name-defined]
        """The same loader on libyaml's scanner and parser (the constructor is _SafeLoader's): 5-10x faster, so
        `trainbench list` reads every spec at once. Only a file it reads without any error is taken from it."""

    _FastLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
else:  # PyYAML built without libyaml
    _FastLoader = None  # type: ignore[assignment,misc]


def _check_values(data: Any, source: str) -> None:
    """Bound what a reader will walk: values counted as expanded (a shared alias counts each time), and
    integers that fit 64 bits (a 5,000-digit one validates, then breaks str() and the spec hash)."""
    n, todo = 0, [data]
    while todo:
        item = todo.pop()
        n += 1
        if n > MAX_SPEC_VALUES:
            raise SpecError(source, [("", f"more than {MAX_SPEC_VALUES} values once YAML aliases are expanded")])
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, (list, tuple, set)):
            todo.extend(item)
        elif isinstance(item, int) and not -(2**63) <= item < 2**63:
            raise SpecError(source, [("", "an integer does not fit in 64 bits")])


def parse_yaml(text: str, source: str) -> Any:
    if _FastLoader is not None:
        try:
            data = yaml.load(text, Loader=_FastLoader)  # noqa: S506 - _FastLoader derives from CSafeLoader
        except Exception:  # noqa: BLE001 - any problem: the pure-Python loader below says it, in today's words
            pass
        else:
            _check_values(data, source)
            return data
    try:
        data = yaml.load(text, Loader=_SafeLoader)  # noqa: S506 - _SafeLoader derives from SafeLoader
    except yaml.YAMLError as e:
        raise SpecError(source, [("", f"not valid YAML (only plain YAML, no tags): {e}")]) from None
    except RecursionError:
        raise SpecError(source, [("", "nested too deeply to be a spec")]) from None
    except Exception as e:  # noqa: BLE001 - a constructor choking on a value (`!!timestamp x`, 5,000 digits)
        raise SpecError(source, [("", f"not valid YAML: {type(e).__name__}: {e}")]) from None
    _check_values(data, source)
    return data


def read_spec_file(path: Path) -> dict[str, Any]:
    source = str(path)
    try:
        exists, is_file = path.exists(), path.is_file()
    except (OSError, ValueError) as e:  # a NUL byte in the name, a name too long
        raise SpecError(source, [("", f"cannot read: {e}")]) from None
    if not exists:
        raise SpecError(source, [("", "no such file (use `trainbench list` to see the workloads)")])
    if not is_file:  # a folder, /dev/zero, a FIFO (which would block a reader forever)
        raise SpecError(source, [("", "not a file")])
    size = path.stat().st_size
    if size > MAX_SPEC_BYTES:
        raise SpecError(source, [("", f"file is {size} bytes; a spec may be at most {MAX_SPEC_BYTES} bytes")])
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(source, [("", "not UTF-8 text")]) from None
    except OSError as e:  # no permission, gone since the check
        raise SpecError(source, [("", f"cannot read: {e.strerror or e}")]) from None
    data = parse_yaml(text, source)
    if not isinstance(data, dict):
        raise SpecError(source, [("", f"top level must be a mapping of fields, got {type(data).__name__}")])
    return data

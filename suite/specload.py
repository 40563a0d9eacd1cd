"""Load a workload spec and check every component it names: suite.spec's schema, then the registry's
components (task, model, data set, backend options) and the plug-ins (optimizer, schedule, loss, compression).

suite/spec/ is pure (it imports no user code and no registry); this module is the one that imports them,
so the import graph has no circle (tests/project/test_import_graph.py).

May import: `suite.spec`, `suite.registry`, `suite.strict_numbers`, `suite.algorithms` (the plug-ins' load-time
checks).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from suite import registry
from suite.spec import SpecError, WorkloadSpec, blame_overrides, merge_spec_data, parse_spec, read_spec_file
from suite.strict_numbers import bool_problems


def validate_spec(
    data: dict[str, Any], source: str, overrides: dict[str, Any] | None = None, variant: str | None = None
) -> WorkloadSpec:
    """Validate raw spec data (plus a variant and --set overrides) and the component blocks it names."""
    if problems := bool_problems(WorkloadSpec, merge_spec_data(data, source, overrides, variant)):
        raise SpecError(source, blame_overrides(problems, overrides))  # before pydantic reads `true` as 1
    spec = parse_spec(data, source, overrides, variant)
    from suite.algorithms import plugins  # late: the plug-ins import torch, which a schema error never needs

    problems = registry.validate_components(spec)
    problems += plugins.check_spec(spec)  # user code is imported now
    if problems:
        raise SpecError(source, blame_overrides(problems, overrides))
    return spec


def load_spec(path: Path, overrides: dict[str, Any] | None = None, variant: str | None = None) -> WorkloadSpec:
    """A spec file, validated whole (schema and components); SpecError names the file and each field."""
    spec = validate_spec(read_spec_file(path), str(path), overrides, variant)
    check_name_place(spec, path, overrides)
    return spec


def load_spec_schema(path: Path, overrides: dict[str, Any] | None = None, variant: str | None = None
                     ) -> WorkloadSpec:
    """A spec file against the schema only (no component, no plug-in is imported, so no torch): what `list` shows and
    what `run` checks before it starts anything (load_spec checks the rest)."""
    data = read_spec_file(path)
    if problems := bool_problems(WorkloadSpec, merge_spec_data(data, str(path), overrides, variant)):
        raise SpecError(str(path), blame_overrides(problems, overrides))
    spec = parse_spec(data, str(path), overrides, variant)
    check_name_place(spec, path, overrides)
    return spec


def tier_workloads(tier: str) -> list[Path]:
    """The spec paths under workloads/ whose `tiers` include this tier, in name order (SpecError for a spec
    that does not load: a tier run must not silently leave one out)."""
    return [path for path in registry.workload_files().values() if tier in load_spec(path).tiers]


def check_name_place(spec: WorkloadSpec, path: Path, overrides: dict[str, Any] | None = None) -> None:
    """A spec's name says which workload its runs belong to. A spec under workloads/ is named by its place
    (`workloads/cv/digits_cnn.yaml` is `cv/digits_cnn`); a spec anywhere else may not claim a built-in
    workload's name. Otherwise its runs are recorded, compared and published as another workload's."""
    root = registry.workloads_root().resolve()
    try:
        real = path.resolve()
    except (OSError, ValueError):
        return
    if real.parent.parent == root and real.suffix in (".yaml", ".yml"):
        expected = f"{real.parent.name}/{real.stem}"
        if spec.name != expected:
            msg = (f"is {spec.name!r}, but this file is workloads/{expected}{real.suffix}: a spec's name must match "
                   f"its place under workloads/ (copy the file to workloads/{spec.name}.yaml to make a new workload)")
            raise SpecError(str(path), blame_overrides([("name", msg)], overrides))
        return
    builtin = registry.workload_files()
    if spec.name in builtin:
        msg = (f"is {spec.name!r}, the name of the built-in workload {_shown(builtin[spec.name])}, but this spec is "
               f"another file: its runs would be recorded, compared and published as that workload's. Give it a "
               f"name of its own, e.g. `name: {_own_name(spec.name, real, builtin)}`")
        raise SpecError(str(path), blame_overrides([("name", msg)], overrides))


def _shown(path: Path) -> str:
    return f"workloads/{path.parent.name}/{path.name}"


def _own_name(name: str, real: Path, builtin: dict[str, Path]) -> str:
    """A free name for a copy: the file's own stem in the same domain, else `<name>_copy`."""
    domain = name.split("/")[0]
    stem = re.sub(r"[^a-z0-9_-]+", "_", real.stem.lower()).strip("_-") or "copy"
    for candidate in (f"{domain}/{stem}", f"{name}_copy", *(f"{name}_copy{i}" for i in range(2, 100))):
        if candidate not in builtin:
            return candidate
    return f"{name}_mine"

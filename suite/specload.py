"""Load a workload spec and check every component it names: suite.spec's schema, then the registry's
components (task, model, data set, backend options) and the plug-ins (optimizer, schedule, loss, compression).

suite/spec.py is pure (it imports no user code and no registry); this module is the one that imports them,
so the import graph has no circle (tests/test_import_graph.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from suite import registry
from suite.algorithms import plugins
from suite.spec import SpecError, WorkloadSpec, blame_overrides, parse_spec, read_spec_file


def validate_spec(
    data: dict[str, Any], source: str, overrides: dict[str, Any] | None = None, variant: str | None = None
) -> WorkloadSpec:
    """Validate raw spec data (plus a variant and --set overrides) and the component blocks it names."""
    spec = parse_spec(data, source, overrides, variant)
    problems = registry.validate_components(spec)
    problems += plugins.check_spec(spec)  # user code is imported now
    if problems:
        raise SpecError(source, blame_overrides(problems, overrides))
    return spec


def load_spec(path: Path, overrides: dict[str, Any] | None = None, variant: str | None = None) -> WorkloadSpec:
    """A spec file, validated whole (schema and components); SpecError names the file and each field."""
    return validate_spec(read_spec_file(path), str(path), overrides, variant)

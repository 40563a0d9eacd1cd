"""Which workload x backend pairs can run: each backend's `supports(spec) -> reason | None`, and the matrix.

Checked before anything starts (`trainbench run`), and shown by `trainbench list --matrix`. Only the spec is
read: no framework is imported, so the matrix is instant and works where a backend is not installed
(installed-or-not is availability, a separate column of `trainbench env`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from suite import registry


def unsupported_reason(backend: str, spec: Any) -> str | None:
    """None when `backend` can run `spec`; else why not, in words that name the field to change."""
    return registry.backend_class(backend).supports(spec)


def matrix(specs: dict[str, Any], backends: list[str] | None = None) -> dict[str, dict[str, str | None]]:
    """{workload: {backend: None (supported) | reason}} for every spec and registered backend."""
    names = backends or list(registry.BACKENDS)
    return {wl: {b: unsupported_reason(b, spec) for b in names} for wl, spec in specs.items()}


def load_all(paths: dict[str, Path]) -> tuple[dict[str, Any], list[str]]:
    from suite.spec import SpecError
    from suite.specload import load_spec

    specs, problems = {}, []
    for name, path in paths.items():
        try:
            specs[name] = load_spec(path)
        except SpecError as e:
            problems.append(str(e))
    return specs, problems

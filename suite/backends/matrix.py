"""Which workload x backend pairs can run: each backend's `supports(spec) -> reason | None`, and the matrix.

Checked before anything starts (`trainbench run`), and shown by `trainbench list --matrix`. Only the spec is
read: no framework is imported, so the matrix is instant and works where a backend is not installed
(installed-or-not is availability, a separate column of `trainbench env`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from suite import registry


def supports_path(backend: str) -> str | None:
    """A registered backend's `supports` in a module that imports no framework (`registry.options_module`). The class's own
    `supports` is this same function (tests/backends/test_support_matrix_torch_free.py). None for a plug-in without
    that module (its class is imported instead)."""
    module = registry.options_module(backend)
    return f"{module}:supports" if module is not None else None


def supports_function(backend: str) -> Any:
    """A backend's `supports(spec)`: from `supports_path` for a registered name (no framework imported), else from the
    plug-in's class (its module is imported)."""
    if (path := supports_path(backend)) is not None:
        return registry.resolve(path, kind="backend support check")
    return registry.backend_class(backend).supports


def unsupported_reason(backend: str, spec: Any) -> str | None:
    """None when `backend` can run `spec`; else why not, in words that name the field to change."""
    par = getattr(spec, "parallel", None)
    if backend != "torch" and par is not None and getattr(par, "tables", None) is not None:
        return "parallel.tables: sharded embedding tables run under --backend torch only (drop parallel.tables)"
    return supports_function(backend)(spec)


def matrix(specs: dict[str, Any], backends: list[str] | None = None) -> dict[str, dict[str, str | None]]:
    """{workload: {backend: None (supported) | reason}} for every spec and registered backend."""
    names = backends or list(registry.BACKENDS)
    return {wl: {b: unsupported_reason(b, spec) for b in names} for wl, spec in specs.items()}


def load_all(paths: dict[str, Path], schema_only: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The specs, validated whole; `schema_only`: against the schema alone (no component or plug-in imported, so no
    torch: `list --json`; the matrix reads only the spec's own fields)."""
    from suite.spec import SpecError
    from suite.specload import load_spec, load_spec_schema

    specs, problems = {}, []
    for name, path in paths.items():
        try:
            specs[name] = (load_spec_schema if schema_only else load_spec)(path)
        except SpecError as e:
            problems.append(str(e))
    return specs, problems


# layouts probed for `trainbench list --matrix`: each dimension on its own, and the pipeline's 3-D combinations
PROBE_LAYOUTS: dict[str, dict[str, Any]] = {
    "fsdp=2": {"fsdp": 2}, "tp=2": {"tp": 2}, "pp=2": {"pp": 2}, "ac=full": {"ac": "full"},
    "ac=selective": {"ac": "selective"}, "tp=2,sp": {"tp": 2, "sp": True},
    "tp=2,loss_parallel": {"tp": 2, "loss_parallel": True},
    "pp=2,tp=2": {"pp": 2, "tp": 2}, "pp=2,fsdp=2": {"pp": 2, "fsdp": 2},
}


def layout_matrix(specs: dict[str, Any], backends: list[str] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """{workload: {backend: {layout: None (supported) | reason}}} for the probe layouts."""
    from suite.spec import ParallelSpec

    names = backends or list(registry.BACKENDS)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for wl, spec in specs.items():
        out[wl] = {}
        for b in names:
            if unsupported_reason(b, spec) is not None:
                continue
            out[wl][b] = {name: unsupported_reason(b, spec.model_copy(update={"parallel": ParallelSpec(**probe)}))
                          for name, probe in PROBE_LAYOUTS.items()}
    return out

"""Where a plugged-in object came from (import path, file, sha256, package version), recorded in each result."""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import sys
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[2]


def _package_version(module_name: str) -> str | None:
    top = module_name.split(".")[0]
    if top == "suite":
        return None
    try:
        return importlib.metadata.version(top)
    except importlib.metadata.PackageNotFoundError:
        mod = sys.modules.get(top)
        version = getattr(mod, "__version__", None)
        return str(version) if version is not None else None


def of(obj: Any) -> dict[str, Any]:
    """`{resolved, builtin, file, sha256, version}` for a class or function."""
    module_name = getattr(obj, "__module__", "") or ""
    qualname = getattr(obj, "__qualname__", getattr(obj, "__name__", type(obj).__name__))
    out: dict[str, Any] = {"resolved": f"{module_name}:{qualname}"}
    builtin = module_name.startswith(("suite.", "torch."))
    out["builtin"] = builtin
    if module_name.startswith("torch."):
        import torch  # loaded already: the class came from it

        out["version"] = torch.__version__
        return out
    try:
        file = inspect.getsourcefile(obj)
    except TypeError:
        file = None
    if file:
        path = Path(file).resolve()
        out["file"] = str(path.relative_to(_REPO)) if path.is_relative_to(_REPO) else str(path)
        out["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    version = _package_version(module_name)
    if version:
        out["version"] = version
    return out


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return repr(value)

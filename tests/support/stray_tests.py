"""veRL 0.9.1's wheel installs a top-level `tests` package into site-packages (its own unit tests, with an
__init__.py). This repository's tests/ is a namespace package (no __init__.py), and a regular package anywhere on
sys.path wins over a namespace one wherever it stands: `import tests.x` reads veRL's. The tests import their helpers
as `support.<module>` (tests/project/test_import_graph.py keeps it so); `claim` makes `tests` this repository's
tests/ in the test process as well (tests/conftest.py calls it first thing), so a `tests.<module>` import (the form
pyproject's `pythonpath = ["."]` suggests) cannot read veRL's either. tests/project/test_install_sets.py checks both
the hazard and the guard."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def stray() -> str | None:
    """Where `import tests` would read from when that is not this repository's tests/ (else None)."""
    found = sys.modules.get("tests")
    paths = list(getattr(found, "__path__", [])) if found is not None else None
    if paths is None:
        spec = importlib.util.find_spec("tests")
        if spec is None:
            return None
        paths = list(spec.submodule_search_locations or [])
    return None if str(TESTS) in paths else (paths[0] if paths else "?")


def claim() -> str | None:
    """Make `tests` this repository's tests/ (a namespace module over it); returns the stray location it replaced."""
    where = stray()
    if where is not None:
        module = types.ModuleType("tests")
        module.__path__ = [str(TESTS)]  # type: ignore[attr-defined]
        module.__file__ = None
        sys.modules["tests"] = module
    return where

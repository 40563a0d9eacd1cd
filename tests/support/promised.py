"""Promised dependencies are required, not optional: a test that needs one FAILS when it is missing.

The dev extra (pyproject.toml) promises DeepSpeed, Megatron-core, Ray, Playwright, torch-geometric, MuJoCo...:
a broken dev install must turn CI red, never into green skips. The only allowed skip is for hardware that
cannot exist on the machine (CUDA, Ascend), and its reason starts with HARDWARE (tests/conftest.py turns
every other skip into a failure).
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

HARDWARE = "hardware:"  # the prefix of the one kind of skip reason that is allowed


def require(module: str, extra: str = "dev") -> ModuleType:
    """Import a promised dependency, or fail (at collection, when called at module level) saying how to fix it."""
    try:
        return importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - ImportError, or a broken install raising anything on import
        pytest.fail(f"promised dependency {module!r} cannot be imported ({type(e).__name__}: {e}); "
                    f"install it: pip install -e '.[{extra}]' (make install does)", pytrace=False)

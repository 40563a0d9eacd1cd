"""The support matrix and `trainbench env` answer without torch (issue 49, point 5) from the same functions the
backend classes use: each registered backend's `supports` is the torch-free one in its engine's options.py (`matrix.supports_path`), and each
availability check that imports nothing says what the class's own `available()` says on this host."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from support.backend_util import ROOT, env

from suite import devices, registry
from suite.backends import matrix


@pytest.mark.parametrize("name", list(registry.BACKENDS))
def test_the_class_supports_is_the_torch_free_function(name: str) -> None:
    assert registry.backend_class(name).supports is matrix.supports_function(name)


@pytest.mark.parametrize("name", list(registry.BACKENDS))
def test_the_class_options_are_the_torch_free_ones(name: str) -> None:
    """A spec's `backends.<name>` block is validated against the options module's `Options` (no framework imported),
    the very class the backend reads."""
    assert registry.backend_options(name) is registry.backend_class(name).Options


def test_every_registered_backend_has_a_torch_free_supports() -> None:
    assert {name: matrix.supports_path(name) for name in registry.BACKENDS} == {
        name: f"suite.backends.{name}.options:supports" for name in registry.BACKENDS}


def test_the_supports_modules_and_the_configs_they_read_import_no_torch() -> None:
    code = textwrap.dedent("""
        import sys
        from suite import registry
        from suite.backends import matrix
        from suite.models.hf import config
        from suite.models.llama import config as llama_config
        for name in registry.BACKENDS:
            matrix.supports_function(name)
        from suite.backends import availability
        from suite.cli.env import _without_import
        print(sorted(m for m in ("torch", "numpy", "deepspeed", "megatron", "torchtitan", "verl") if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.skipif(bool(devices.accelerator_evidence()), reason="env imports the frameworks where a device shows")
@pytest.mark.parametrize("name", list(registry.BACKENDS))
def test_env_without_imports_says_what_the_backend_class_says(name: str) -> None:
    from suite.cli.env import _without_import

    device = devices.current()
    assert _without_import()[name](device.type) == registry.backend_class(name)(device).available()

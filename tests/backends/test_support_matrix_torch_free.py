"""The support matrix and `trainbench env` answer without torch (issue 49, point 5) from the same functions the
backend classes use: each registered backend's `supports` is the torch-free one `matrix.SUPPORTS` names, and each
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


def test_every_registered_backend_has_a_torch_free_supports() -> None:
    assert set(matrix.SUPPORTS) == set(registry.BACKENDS)


def test_the_supports_modules_and_the_configs_they_read_import_no_torch() -> None:
    code = textwrap.dedent("""
        import sys
        from suite.backends import matrix
        from suite.models.hf import config
        from suite.models.llama import config as llama_config
        for name in matrix.SUPPORTS:
            matrix.supports_function(name)
        from suite.backends import availability
        from suite.cli.env import _without_import
        print(sorted(m for m in ("torch", "numpy", "deepspeed", "megatron", "torchtitan", "verl") if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_the_moved_configs_are_the_model_modules_own() -> None:
    from suite.models.common import configs
    from suite.models.common import configs as common_configs
    from suite.models.hf import config as hf_config
    from suite.models.hf import config as hf_config_mod
    from suite.models.llama import config as llama_config

    assert llama_config.Config is llama_config.Config and hf_config_mod.Config is hf_config.Config
    assert common_configs.MoEConfig is configs.MoEConfig and common_configs.LoraConfig is configs.LoraConfig


@pytest.mark.skipif(bool(devices.accelerator_evidence()), reason="env imports the frameworks where a device shows")
@pytest.mark.parametrize("name", list(registry.BACKENDS))
def test_env_without_imports_says_what_the_backend_class_says(name: str) -> None:
    from suite.cli.env import _without_import

    device = devices.current()
    assert _without_import()[name](device.type) == registry.backend_class(name)(device).available()

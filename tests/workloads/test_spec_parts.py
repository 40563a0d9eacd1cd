"""What spec validation reads of a registered component lives apart from its torch (issue 49, point 5): a task's
`reported_metrics`, `loss_hook` and `check_spec` in suite/workloads/checks.py (TASK_CHECKS), a model's or data set's
pydantic Config in its own module (MODEL_CONFIGS, DATASET_CONFIGS).

Each part is the very object the component uses (identity, not a copy), importing every part imports nothing heavy
(so a new component whose module imports torch needs its part listed, or this fails), and a plug-in component with no
torch-free part is still validated, by importing it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.backend_util import ROOT, env

from suite import registry
from suite.spec import SpecError, read_spec_file
from suite.specload import validate_spec

HEAVY = ("torch", "numpy", "pandas", "pyarrow", "scipy", "sklearn", "transformers", "peft", "safetensors",
         "deepspeed", "megatron", "torchtitan", "verl", "ray", "duckdb", "gymnasium", "torch_geometric")


@pytest.mark.parametrize("name", list(registry.TASKS))
def test_a_tasks_checks_are_the_workload_classs_own(name: str) -> None:
    checks, task = registry.task_checks(name), registry.task_class(name)
    assert name in registry.TASK_CHECKS and issubclass(task, checks)
    for attr in ("reported_metrics", "loss_hook", "check_spec"):
        assert getattr(task, attr, None) is getattr(checks, attr, None), attr


@pytest.mark.parametrize("name", list(registry.MODELS))
def test_a_models_config_is_the_components_own(name: str) -> None:
    assert registry.model_config(name) is registry.model_component(name).Config


@pytest.mark.parametrize("name", list(registry.DATASETS))
def test_a_data_sets_config_is_the_components_own(name: str) -> None:
    assert registry.data_config(name) is registry.data_component(name).Config


def test_the_parts_name_only_registered_components() -> None:
    assert set(registry.TASK_CHECKS) <= set(registry.TASKS)
    assert set(registry.MODEL_CONFIGS) <= set(registry.MODELS)
    assert set(registry.DATASET_CONFIGS) <= set(registry.DATASETS)


def test_every_registered_components_spec_part_imports_nothing_heavy() -> None:
    """A fresh interpreter reads every part (a listed one, else the component itself): none of HEAVY is imported."""
    code = textwrap.dedent(f"""
        import json, sys
        from suite import registry
        for name in registry.TASKS:
            registry.task_checks(name)
        for name in registry.MODELS:
            registry.model_config(name)
        for name in registry.DATASETS:
            registry.data_config(name)
        for name in registry.BACKENDS:
            registry.backend_options(name)
        print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []


PLUGIN = """
from pydantic import BaseModel, ConfigDict, Field
from suite.registry import Component

class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    width: int = Field(default=4, gt=0)

COMPONENT = Component(Config, build=lambda cfg, meta: None)
"""


def test_a_plug_in_component_without_a_torch_free_part_is_validated_by_importing_it(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    (tmp_path / "h49f_plugin_model.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    raw = read_spec_file(registry.workload_files()["cv/digits_cnn"])
    raw["model"] = {"arch": "h49f_plugin_model:COMPONENT", "width": 8}
    assert validate_spec(raw, "plugin.yaml").model.arch == "h49f_plugin_model:COMPONENT"
    raw["model"] = {"arch": "h49f_plugin_model:COMPONENT", "width": 0}
    with pytest.raises(SpecError, match="model.width"):
        validate_spec(raw, "plugin.yaml")
    raw["model"] = {"arch": "h49f_plugin_model:COMPONENT", "nosuch": 1}
    with pytest.raises(SpecError, match="model.nosuch"):
        validate_spec(raw, "plugin.yaml")


# shipped specs whose check imports torch by design: they name code by import path in a module that imports it (none
# now: cv/cifar10_resnet's schedule, suite.algorithms.airbench:schedule, sits beside an optimizer whose torch class is
# defined on first use)
IMPORTS_USER_CODE: dict[str, str] = {}


def test_every_shipped_spec_validates_without_anything_heavy() -> None:
    """Each workloads/*.yaml, validated whole in one fresh interpreter (those above left out): none of HEAVY."""
    names = [n for n in registry.workload_files() if n not in IMPORTS_USER_CODE]
    code = textwrap.dedent(f"""
        import json, sys
        from suite import registry
        from suite.specload import load_spec
        files = registry.workload_files()
        for name in {names!r}:
            load_spec(files[name])
        print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []

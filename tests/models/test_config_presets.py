"""A model Config's `preset` is filled in by one helper (suite/models/common/configs.py `under_preset`): a given field
wins over the preset's, and a preset that is not a name (a list from `--set model.preset=[tiny]`) is refused by
the field's own type, naming it, where a dict lookup used to raise TypeError (unhashable) out of validation."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError
from support.backend_util import ROOT, env

from suite.models.flux.config import Config as FluxConfig
from suite.models.recsys.dcnv2_config import Config as DCNv2Config
from suite.models.recsys.hstu_config import Config as HSTUConfig

CONFIGS = [FluxConfig, DCNv2Config, HSTUConfig]


# each Config, one of its presets, and a field of it with no constraint tying it to another
FILLED = [(FluxConfig, "flux-schnell", "depth"), (DCNv2Config, "tiny", "cross_layers"), (HSTUConfig, "tiny", "num_layers")]


@pytest.mark.parametrize(("config", "name", "field"), FILLED, ids=[c.__module__ for c, _, _ in FILLED])
def test_a_preset_fills_the_fields_not_given(config, name: str, field: str) -> None:
    preset = config.model_validate({"preset": name}).model_dump()
    mine = config.model_validate({"preset": name, field: preset[field] + 1}).model_dump()
    assert mine == {**preset, field: preset[field] + 1}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__module__)
@pytest.mark.parametrize("preset", [["tiny"], {"a": 1}, "huge", 3])
def test_a_preset_that_is_not_a_name_is_a_validation_error_naming_preset(config, preset) -> None:
    with pytest.raises(ValidationError) as e:
        config.model_validate({"preset": preset})
    assert any(err["loc"] == ("preset",) for err in e.value.errors()), e.value


def test_the_cli_refuses_a_list_preset_with_exit_2_naming_the_field() -> None:
    done = subprocess.run([sys.executable, "-m", "suite.cli", "run", "rec/dlrm_dcnv2", "--variant", "tiny", "--set",
                           "model.preset=[tiny]"], capture_output=True, text=True, env=env(), cwd=ROOT, timeout=300)
    assert done.returncode == 2 and "model.preset" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr

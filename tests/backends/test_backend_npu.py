"""Ascend NPU backend on a machine without torch_npu: import-safe, unavailable with a reason, refused cleanly."""

from __future__ import annotations

import importlib.util
import json

import pytest
from support.backend_util import CHAR_GPT, DIGITS, trainbench

from suite import devices
from suite.backends.npu.backend import NpuBackend, supports
from suite.spec import SpecError
from suite.specload import load_spec

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None,
                                reason="hardware: these tests describe a machine without torch_npu (an Ascend runner has it)")


def test_unavailable_with_a_reason_a_user_can_act_on():
    avail = NpuBackend(devices.Device("cpu")).available()
    assert not avail.ok and "torch_npu is not installed" in avail.reason and "CANN" in avail.reason


def test_env_reports_every_backend_with_version_or_reason():
    p = trainbench("env", "--json")
    assert p.returncode == 0, p.stderr
    backends = json.loads(p.stdout)["backends"]
    assert set(backends) >= {"torch", "deepspeed", "megatron", "npu"}
    assert backends["npu"]["available"] is False and "torch_npu" in backends["npu"]["reason"]
    for name in ("torch", "deepspeed", "megatron"):
        assert backends[name]["available"] is True and backends[name]["version"], backends[name]


def test_npu_runs_what_torch_runs_and_validates_its_block():
    assert supports(load_spec(DIGITS)) is None and supports(load_spec(CHAR_GPT)) is None
    with pytest.raises(SpecError, match=r"backends\.npu\.grad_clp"):
        load_spec(DIGITS, {"backends.npu.grad_clp": 1.0})


def test_a_run_on_npu_here_is_refused_before_it_starts(tmp_path):
    p = trainbench("run", "cv/digits_cnn", "--variant", "tiny", "--backend", "npu", "--results", str(tmp_path))
    assert p.returncode == 2
    text = " ".join(p.stderr.split())
    assert "--backend npu is not available here: torch_npu is not installed" in text
    assert not list(tmp_path.rglob("*.json"))  # nothing recorded: bad input, not a failed run


def test_setup_refuses_without_an_npu():
    from suite.backends.base import RunOptions

    with pytest.raises(RuntimeError, match="torch_npu is not installed"):
        NpuBackend(devices.Device("cpu")).setup(None, RunOptions())  # type: ignore[arg-type]


def test_matrix_lists_every_pair(tmp_path):
    p = trainbench("list", "--matrix", "--json")
    assert p.returncode == 0, p.stderr
    grid = json.loads(p.stdout)
    digits = grid["cv/digits_cnn"]
    assert digits["torch"]["supported"] and digits["deepspeed"]["supported"] and digits["npu"]["supported"]
    assert not digits["megatron"]["supported"] and "model.arch gpt" in digits["megatron"]["reason"]

"""Spec-level `precision`, `compile` and `data.micro_batch_size`: validated, overridable with --set, the CLI
flags win when given, the value that ran is recorded; gradient accumulation matches one big batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.backend_util import CHAR_GPT, DIGITS, json_rows, trainbench
from support.curves import loss_curve

from suite.algorithms import bundles, plugins
from suite.algorithms import precision as recipes
from suite.backends.torch.backend import split_batch
from suite.execution import plan
from suite.spec import PRECISIONS, SpecError
from suite.specload import load_spec

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]


def test_the_spec_names_exactly_the_precision_recipes():
    assert set(PRECISIONS) == set(recipes.RECIPES)


def test_precision_and_compile_validate_and_set():
    spec = load_spec(DIGITS, {"precision": "bf16", "compile": True})
    assert spec.precision == "bf16" and spec.compile is True
    with pytest.raises(SpecError, match=r"precision: .*'fp32', 'bf16'.*\(from --set precision='int3'\)"):
        load_spec(DIGITS, {"precision": "int3"})
    with pytest.raises(SpecError, match=r"compile: .*(from --set compile='sometimes')"):
        load_spec(DIGITS, {"compile": "sometimes"})


def test_unset_fields_leave_the_spec_hash_alone():
    plain = load_spec(DIGITS)
    assert "precision" not in plain.canonical() and "compile" not in plain.canonical()
    assert "micro_batch_size" not in plain.canonical()["data"]
    assert load_spec(DIGITS, {"precision": "bf16"}).spec_hash() != plain.spec_hash()
    assert load_spec(DIGITS, {"data.micro_batch_size": 16}).spec_hash() != plain.spec_hash()


def test_micro_batch_size_must_divide_the_batch():
    with pytest.raises(SpecError, match=r"data: .*micro_batch_size 48 does not divide batch_size 64"):
        load_spec(DIGITS, {"data.batch_size": 64, "data.micro_batch_size": 48})
    with pytest.raises(SpecError, match=r"data.micro_batch_size: Input should be greater than or equal to 1"):
        load_spec(DIGITS, {"data.micro_batch_size": 0})


def test_precision_is_chosen_flag_then_bundle_then_spec_then_fp32():
    assert bundles.choose_precision("fp16", "bf16", "bf16_master") == ("fp16", "--precision")
    assert bundles.choose_precision(None, "bf16", "fp16") == ("bf16", "--algo")
    assert bundles.choose_precision(None, None, "bf16") == ("bf16", "spec")
    assert bundles.choose_precision(None, None, None) == ("fp32", "default")
    p = bundles.prepare(DIGITS, None, {"precision": "bf16"}, None, None)
    assert (p.precision, p.extra_config["precision_source"]) == ("bf16", "spec")
    assert p.extra_config["algorithm"]["precision"]["name"] == "bf16"
    p = bundles.prepare(DIGITS, None, {"precision": "bf16"}, None, "fp32")
    assert (p.precision, p.extra_config["precision_source"]) == ("fp32", "--precision")


def test_a_spec_precision_the_device_cannot_do_runs_fp32_and_says_why(monkeypatch):
    monkeypatch.setattr(recipes, "unsupported_reason", lambda name, dev: f"{name}: no bf16 on this fake {dev}")
    p = bundles.prepare(DIGITS, None, {"precision": "bf16"}, None, None)
    p.fit_precision("cuda")
    assert p.precision == "fp32"
    assert p.extra_config["precision_fallback"] == {"asked": "bf16", "ran": "fp32",
                                                    "reason": "bf16: no bf16 on this fake cuda"}
    assert p.extra_config["algorithm"]["precision"]["name"] == "fp32"
    asked = bundles.prepare(DIGITS, None, {}, None, "bf16")  # asked for by the flag: refused, never mapped
    asked.fit_precision("cuda")
    assert asked.precision == "bf16"
    assert plugins.refusals(asked.spec, "torch", "bf16", "cuda")


def test_compile_comes_from_the_spec_unless_the_flag_says(monkeypatch):
    specs = [(DIGITS, bundles.prepare(DIGITS, None, {"compile": True}, None, None))]
    assert plan.requests(specs, "torch", range(1))[0].compile is True
    assert plan.requests(specs, "torch", range(1), compile=None)[0].compile is True
    assert plan.requests(specs, "torch", range(1), compile=False)[0].compile is False
    plain = [(DIGITS, bundles.prepare(DIGITS, None, {}, None, None))]
    assert plan.requests(plain, "torch", range(1), compile=None)[0].compile is False
    assert plan.requests(plain, "torch", range(1), compile=True)[0].compile is True


def test_micro_batching_is_refused_by_no_backend():
    """Every backend accumulates gradients over micro-batches (issue 16's parity tests prove each)."""
    spec = load_spec(DIGITS, {"data.batch_size": 64, "data.micro_batch_size": 16})
    for backend in ("torch", "deepspeed", "megatron", "npu"):
        assert not [r for r in plugins.refusals(spec, backend, "fp32", "cpu") if "micro_batch" in r]


def test_split_batch_cuts_every_tensor_and_refuses_packed_graphs():
    x, y = torch.arange(24.0).reshape(8, 3), torch.arange(8)
    parts = split_batch({"x": x, "pair": (x, y)}, 4, 8)
    assert len(parts) == 4 and torch.equal(parts[1]["pair"][1], torch.tensor([2, 3]))
    assert torch.equal(torch.cat([p["x"] for p in parts]), x)
    graph = {"x": torch.zeros(30, 3), "edge_index": torch.zeros(2, 50), "y": torch.zeros(8)}
    with pytest.raises(ValueError, match="do not support data.micro_batch_size"):
        split_batch(graph, 4, 8)


def test_gradient_accumulation_1x64_matches_4x16():
    """The same 64-sample batches, one pass vs four micro-batches of 16 (loss scaled by 1/4): the same curve, within
    the one pass's own noise scale measured here (tests/support/noise.py: its batches' samples reordered)."""
    from support.noise import measure

    steps = 8
    whole, _, noise = measure(CHAR_GPT, steps, overrides={"data.batch_size": 64})
    micro = loss_curve(CHAR_GPT, "torch", steps, overrides={"data.batch_size": 64, "data.micro_batch_size": 16})
    worst = max(abs(a - b) for a, b in zip(whole, micro, strict=True))
    assert worst <= noise.tol(), (worst, str(noise), whole, micro)
    assert whole[-1] < whole[0] - 0.5  # a learning curve, not a flat line that trivially agrees
    other = loss_curve(CHAR_GPT, "torch", steps, overrides={"data.batch_size": 16})
    assert max(abs(a - b) for a, b in zip(whole, other, strict=True)) > 1e-2  # the tolerance means something


@pytest.mark.slow
def test_cli_records_the_precision_and_compile_that_ran(tmp_path):
    r = trainbench("run", "cv/digits_cnn", "--variant", "tiny", "--set", "precision=bf16", "--set",
                   "compile=true", "--no-compile", "--results", str(tmp_path), "--json", "--quiet")
    assert r.returncode == 0, r.stderr[-3000:]
    (row,) = json_rows(r.stdout)
    result = next(tmp_path.rglob("*.json"))
    import json

    config = json.loads(result.read_text())["config"]
    assert config["precision"] == "bf16" and config["precision_source"] == "spec"
    assert config["compile"] is False and config["spec"]["compile"] is True
    assert row

"""Algorithms through the real harness and CLI: --algo, user code outside the repo, recipes, compression."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.user_code import USER_OPTIMIZER

from suite import harness
from suite.algorithms import bundles, plugins
from suite.results.record import load_results
from suite.spec import SpecError
from suite.specload import load_spec

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "workloads" / "cv" / "digits_cnn.yaml"


def write_user_code(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "my_optim.py"
    path.write_text(USER_OPTIMIZER)
    return path


def env_with(*paths: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *map(str, paths)])
    env["OMP_NUM_THREADS"] = "1"
    return env


def cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def run_digits(tmp_path: Path, algo: str | None, variant: str | None = "tiny", precision: str | None = None,
               overrides: dict | None = None):
    prepared = bundles.prepare(DIGITS, algo, overrides or {}, variant, precision)
    req = harness.RunRequest(spec=prepared.spec, seed=0, precision=prepared.precision, threads=1,
                             results_dir=tmp_path / "results", overrides=prepared.overrides, variant=variant,
                             extra_config=prepared.extra_config)
    result, _ = harness.run(req)
    return result


def test_user_optimizer_outside_the_repo_via_algo_is_recorded(tmp_path):
    user_dir = tmp_path / "elsewhere"
    src = write_user_code(user_dir)
    proc = cli("run", "cv/digits_cnn", "--variant", "tiny", "--algo", "my_optim:HandAdam", "--set",
               "optimizer.lr=0.004", "--results", str(tmp_path / "res"), "--threads", "1", "--quiet", "--json",
               env=env_with(user_dir), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [(_, result)] = load_results(tmp_path / "res").results
    assert result.status in ("reached", "budget") and result.steps == 40
    algo = result.config["algorithm"]
    opt = algo["optimizer"]
    assert opt["resolved"] == "my_optim:HandAdam" and opt["builtin"] is False
    assert Path(opt["file"]) == src.resolve()
    assert opt["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert opt["hyperparameters"] == {"lr": 0.004, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0001}
    assert algo["source"] == {"kind": "optimizer"} and algo["label"] == "my_optim:HandAdam"
    assert result.config["spec"]["optimizer"]["name"] == "my_optim:HandAdam"
    assert result.final_metrics["loss"] < 2.2  # it trained: a 10-class guess is ln(10) = 2.30


def test_bad_algorithms_are_refused_before_anything_runs(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from suite.cli import app

    user_dir = tmp_path / "u"
    write_user_code(user_dir)
    (user_dir / "broken.py").write_text("class NotOpt:\n    pass\n")
    monkeypatch.syspath_prepend(str(user_dir))
    cases = [
        (["--algo", "nosuch_module:Opt"], "optimizer.name: optimizer 'nosuch_module:Opt': cannot import module"),
        (["--algo", "broken:NotOpt"], "not a torch.optim.Optimizer subclass"),
        (["--algo", "my_optim:HandAdam", "--set", "optimizer.momentum=0.9"], "HandAdam takes no momentum"),
        (["--algo", "nothing-like-this"], "not a bundle"),
        (["--set", "compression.name=magnitude_prune", "--set", "compression.sparsity=2"], "compression.sparsity"),
        (["--set", "loss=my_optim:HandAdam"], "loss: loss 'my_optim:HandAdam': a loss class is built as Cls(**params)"),
        (["--set", "schedule.name=nope"], "schedule.name: unknown schedule 'nope'"),
        (["--precision", "fp8"], "expected one of fp32, bf16, fp16, bf16_master"),
    ]
    for args, message in cases:
        res = CliRunner().invoke(app, ["run", "cv/digits_cnn", "--variant", "tiny", *args,
                                       "--results", str(tmp_path / "res"), "--quiet"])
        stderr = " ".join(res.stderr.split())  # rich wraps long lines
        assert res.exit_code == 2, (args, stderr)
        assert message in stderr, (args, stderr)
    assert not (tmp_path / "res").exists()  # nothing ran, nothing was recorded


def test_bundle_file_and_builtin_bundles(tmp_path):
    bundle = tmp_path / "fast.yaml"
    bundle.write_text("name: lion-fast\noptimizer: {name: lion, lr: 0.002}\nschedule: {name: cosine}\n"
                      "loss: {name: label_smoothing, smoothing: 0.05}\n")
    prepared = bundles.prepare(DIGITS, str(bundle), {}, "tiny", None)
    assert prepared.spec.optimizer.name == "lion" and prepared.spec.optimizer.lr == 0.002
    assert prepared.spec.optimizer.weight_decay == 0.0001  # kept from the workload
    assert prepared.spec.schedule.name == "cosine" and prepared.spec.loss.params() == {"smoothing": 0.05}
    algo = prepared.extra_config["algorithm"]
    assert algo["label"] == "lion-fast" and algo["source"]["sha256"] == hashlib.sha256(bundle.read_bytes()).hexdigest()
    assert algo["loss"]["resolved"] == "suite.algorithms.losses:label_smoothing"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\noptimiser: {name: lion}\n")
    with pytest.raises(bundles.AlgoError, match="optimiser: unknown field"):
        bundles.prepare(DIGITS, str(bad), {}, "tiny", None)
    for name in bundles.BUNDLES:  # every built-in bundle validates against a real spec
        assert bundles.prepare(DIGITS, name, {}, None, None).spec.name == "cv/digits_cnn"
    with pytest.raises(SpecError, match="compression.end_step: 200 is past budget.max_steps 40"):
        bundles.prepare(DIGITS, "prune50", {}, "tiny", None)  # tiny runs 40 steps: refused, not silently short


@pytest.mark.parametrize("recipe", ["fp32", "bf16", "fp16", "bf16_master"])
def test_precision_recipes_train_through_the_backend(tmp_path, recipe):
    result = run_digits(tmp_path, None, precision=recipe)
    assert result.status == "budget", result.error  # tiny: 40 steps, a target it does not aim to reach
    assert result.final_metrics["loss"] < 2.25
    assert result.config["precision"] == recipe
    assert result.config["algorithm"]["precision"]["name"] == recipe


def test_pruning_run_reaches_target_only_at_full_sparsity(tmp_path):
    result = run_digits(tmp_path, "prune50", variant=None, overrides={"budget.max_train_s": 120})
    assert result.status == "reached", result.error
    assert result.steps_to_target >= 200  # the prune50 bundle reaches 50% sparsity at step 200
    report = result.config["algorithm_report"]["compression"]
    assert report["measured_sparsity"] == pytest.approx(0.5, abs=0.01)
    assert result.config["algorithm"]["compression"]["params"]["sparsity"] == 0.5


def test_qat_and_label_smoothing_runs(tmp_path):
    qat = run_digits(tmp_path, "qat_int8")
    assert qat.status == "budget" and qat.final_metrics["loss"] < 2.25, qat.error
    assert qat.config["algorithm_report"]["compression"]["quantised_layers"] == 3  # tiny: one conv, two linears
    ls = run_digits(tmp_path, "label_smoothing")
    assert ls.status == "budget" and ls.config["spec"]["loss"] == {"name": "label_smoothing", "smoothing": 0.1}


def test_refusals_name_what_cannot_run():
    spec = load_spec(DIGITS, {"compression": {"name": "int8_qat"}})
    reasons = plugins.refusals(spec, "deepspeed", "bf16_master", "cpu")
    assert any("bf16_master is implemented by the torch backend only" in r for r in reasons)
    assert any("needs the torch backend" in r for r in reasons)
    assert plugins.refusals(spec, "torch", "bf16", "cpu") == []
    from suite.algorithms import losses

    class FixedLossTask:  # a task that does not call the loss hook
        pass

    problems = losses.check(load_spec(DIGITS, {"loss": "label_smoothing"}), FixedLossTask)
    assert problems == [("loss", "task 'image_classification' does not take a loss override (its loss is fixed "
                                 "by the task)")]


def test_spec_hash_unchanged_without_compression():
    spec = load_spec(DIGITS)
    assert "compression" not in spec.canonical()
    assert "compression" in load_spec(DIGITS, {"compression": {"name": "int8_qat"}}).canonical()
    assert json.dumps(spec.canonical()["loss"]) == "null"

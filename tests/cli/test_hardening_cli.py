"""Issue 17, specs, flags and output: a spec is named by its place, bad flags are named, paths print as text,
tables keep their rows whole off a terminal, and an optimizer without weight_decay runs every workload."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from suite import registry
from suite.algorithms import optimizers
from suite.cli import app
from suite.spec import OptimizerSpec, SpecError, parse_override, parse_yaml
from suite.specload import load_spec

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
DIGITS = ROOT / "workloads" / "cv" / "digits_cnn.yaml"
SIGN = '''import torch


class SignMomentum(torch.optim.Optimizer):
    """Takes no weight_decay (as many research optimizers)."""

    def __init__(self, params, lr=1e-3, momentum=0.9):
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("m", torch.zeros_like(p))
                buf.mul_(g["momentum"]).add_(p.grad)
                p.add_(buf.sign(), alpha=-g["lr"])
'''


def _env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    e.update({"PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS), *extra.pop("PATHS", "").split(os.pathsep)]),
              "OMP_NUM_THREADS": "1", **extra})
    return e


def _sh(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True,
                          env=_env(**env), timeout=timeout, cwd=ROOT)


def _overrides(*sets: str) -> dict:
    return dict(parse_override(s) for s in sets)


# ---- item 7: a spec's name is its place under workloads/ -----------------------------------------------------


@pytest.fixture
def workloads_root(tmp_path, monkeypatch):
    root = tmp_path / "workloads"
    (root / "cv").mkdir(parents=True)
    monkeypatch.setenv("TRAINBENCH_WORKLOADS", str(root))
    registry.workloads_root.cache_clear()
    yield root
    registry.workloads_root.cache_clear()


def test_a_spec_under_workloads_named_as_another_workload_is_refused(workloads_root):
    data = yaml.safe_load(DIGITS.read_text())
    data["name"] = "cv/imagenet_resnet50"
    (workloads_root / "cv" / "digits_cnn.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"name: is 'cv/imagenet_resnet50', but this file is workloads/cv/digits_cnn"):
        load_spec(workloads_root / "cv" / "digits_cnn.yaml")


def test_set_name_on_a_workload_is_refused_and_names_the_flag():
    with pytest.raises(SpecError, match=r"name: .*must match its place.*\(from --set name='cv/digits_cnn2'\)"):
        load_spec(DIGITS, _overrides("name=cv/digits_cnn2"))
    assert load_spec(DIGITS).name == "cv/digits_cnn"


def test_every_shipped_spec_is_named_by_its_place():
    for name, path in registry.workload_files().items():
        assert load_spec(path).name == name


def _digits_copy(folder: Path, file: str, name: str) -> Path:
    data = yaml.safe_load(DIGITS.read_text())
    data["name"] = name
    path = folder / file
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(("file", "claimed", "suggested"), [
    ("mine.yaml", "cv/imagenet_resnet50", "cv/mine"),  # the digits model claiming another workload's name
    ("digits_cnn.yaml", "cv/digits_cnn", "cv/digits_cnn_copy"),  # a plain copy under its own built-in name
])
def test_a_spec_outside_workloads_claiming_a_built_in_name_is_refused(tmp_path, file, claimed, suggested):
    path = _digits_copy(tmp_path, file, claimed)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    text = str(e.value)
    assert str(path) in text and "name: is " + repr(claimed) in text
    assert f"the built-in workload workloads/{claimed}.yaml" in text and f"`name: {suggested}`" in text
    assert load_spec(_digits_copy(tmp_path, "ok.yaml", suggested)).name == suggested  # the suggestion is free


def test_cli_refuses_a_copy_claiming_a_built_in_name_with_exit_2(tmp_path):
    path = _digits_copy(tmp_path, "mine.yaml", "cv/imagenet_resnet50")
    for args in (["spec", "validate", str(path)], ["run", str(path), "--variant", "tiny", "--quiet",
                                                     "--results", str(tmp_path / "res")]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, res.output
        assert "name: is 'cv/imagenet_resnet50', the name of the built-in workload" in " ".join(res.output.split())
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").rglob("*.json"))


def test_set_name_to_a_built_in_name_is_refused_on_a_users_spec(tmp_path):
    path = _digits_copy(tmp_path, "mine.yaml", "cv/test_mine")
    assert load_spec(path).name == "cv/test_mine"
    with pytest.raises(SpecError, match=r"name: is 'cv/digits_cnn', the name of the built-in workload .*"
                                        r"\(from --set name='cv/digits_cnn'\)"):
        load_spec(path, _overrides("name=cv/digits_cnn"))


# ---- item 13: a backend import path that is not a backend ----------------------------------------------------


@pytest.mark.parametrize("ref", ["os:system", "suite.results.record:Result"])
def test_backend_import_path_that_is_not_a_backend_is_bad_input(ref):
    res = CliRunner().invoke(app, ["run", "cv/digits_cnn", "--backend", ref, "--quiet"])
    assert res.exit_code == 2, res.output
    assert "--backend" in res.output and ref in res.output and "does not subclass" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


# ---- item 14: paths print as text ------------------------------------------------------------------------------


def test_results_validate_prints_a_markup_path_as_text(tmp_path):
    folder = tmp_path / "x[/bold]y"  # a folder `x[` holding `bold]y`: the printed path reads as a closing tag
    folder.mkdir(parents=True)
    p = _sh("results", "validate", str(folder))
    assert p.returncode == 0, p.stderr
    assert f"0 valid, 0 invalid result file(s) under {folder}" in p.stdout and "Traceback" not in p.stderr


@pytest.mark.slow
def test_run_prints_a_markup_results_path_as_text(tmp_path):
    res = tmp_path / "r[/bold]s"
    p = _sh("run", "cv/digits_cnn", "--variant", "tiny", "--quiet", "--results", str(res), "--threads", "1",
            timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"results written under {res}/" in p.stdout and "MarkupError" not in p.stderr
    assert len(list(res.rglob("*.json"))) == 1


# ---- item 17: tables are not squeezed when stdout is not a terminal -----------------------------------------


def test_list_table_keeps_each_row_on_one_line_in_a_pipe():
    p = _sh("list")  # stdout is a pipe, $COLUMNS unset: a CI log
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if "cv/imagenet_resnet50" in ln]
    budget = load_spec(ROOT / "workloads" / "cv" / "imagenet_resnet50.yaml").budget.max_train_s
    assert len(lines) == 1 and "accuracy >= 0.759" in lines[0] and f"{budget:.0f} s" in lines[0]


# ---- item 20: smaller points ----------------------------------------------------------------------------------


def test_yaml_merge_keys_are_plain_yaml(tmp_path):
    assert parse_yaml("d: &d {a: 1, b: 2}\nx:\n  <<: *d\n  b: 3\n", "s") == {"d": {"a": 1, "b": 2}, "x": {"a": 1, "b": 3}}
    with pytest.raises(SpecError, match="duplicate key 'a'"):
        parse_yaml("x: {a: 1, a: 2}\n", "s")
    text = DIGITS.read_text().replace("name: cv/digits_cnn", "name: cv/test_merge") + "  short: &short\n    budget.max_train_s: 30\n  shorter:\n    <<: *short\n    eval.every_steps: 5\n"
    path = tmp_path / "cv_merge.yaml"
    path.write_text(text)
    spec = load_spec(path, variant="shorter")
    assert spec.budget.max_train_s == 30 and spec.eval.every_steps == 5


@pytest.mark.parametrize("value", ["1e308", "1.0e308", "3e6"])
def test_an_absurd_finite_budget_is_refused_like_inf(value):
    with pytest.raises(SpecError, match=r"budget.max_train_s: Input should be less than or equal to 2592000.*--set budget.max_train_s"):
        load_spec(DIGITS, _overrides(f"budget.max_train_s={value}"))


def test_seeds_has_a_ceiling_named_by_its_flag():
    res = CliRunner().invoke(app, ["run", "cv/digits_cnn", "--seeds", "100000", "--quiet"])
    assert res.exit_code == 2 and "--seeds" in res.output


@pytest.mark.parametrize("cmd", [["run", "cv/digits_cnn"], ["study", "studies/smoke_optimizers.yaml"],
                                 ["ab", "--base", "HEAD", "--head", "HEAD", "-w", "cv/digits_cnn"], ["env", "--peak"]])
@pytest.mark.parametrize("threads", ["0", "-1"])
def test_threads_below_one_are_refused_by_every_command_naming_the_flag(cmd, threads):
    """0 used to mean 'the default' silently and -1 reached torch.set_num_threads (an error result after the
    start-up); every command with --threads now refuses both before doing anything."""
    res = CliRunner().invoke(app, [*cmd, "--threads", threads])
    assert res.exit_code == 2 and "--threads" in res.output, res.output


def test_set_of_an_unknown_nested_field_names_the_flag():
    with pytest.raises(SpecError, match=r"a: unknown field.*\(from --set a\.b\.c=''\)"):
        load_spec(DIGITS, _overrides("a.b.c="))


def test_a_huge_error_is_clipped_on_the_run_page_and_whole_in_the_result(tmp_path):
    from benchmarks.sim.results import site_result
    from suite.results.record import write_result
    from suite.site.build import build_site

    error = "E" * 3_000_000 + " the end"
    write_result(tmp_path / "res", site_result(status="error", tta_s=None, error=error))
    build_site(tmp_path / "res", tmp_path / "out")
    page = next((tmp_path / "out" / "r").glob("*.html"))
    assert page.stat().st_size < 200_000 and "characters left out here" in page.read_text()
    assert "the end" in page.read_text()  # the tail (where a traceback ends) is kept
    copy = json.loads(next((tmp_path / "out" / "r").glob("*.json")).read_text())
    assert copy["error"] == error


# ---- item 15: an optimizer that takes no weight_decay -----------------------------------------------------------


@pytest.fixture
def sign_module(tmp_path, monkeypatch):
    (tmp_path / "signmom.py").write_text(SIGN)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_weight_decay_is_applied_decoupled_when_the_optimizer_takes_none(sign_module):
    torch.manual_seed(0)
    spec = OptimizerSpec(name="signmom:SignMomentum", lr=0.1, weight_decay=0.5)
    w = torch.nn.Parameter(torch.randn(4, 3))
    before = w.detach().clone()
    opt = optimizers.build_optimizer(spec, [w])
    w.grad = torch.zeros_like(w)  # sign(0) = 0: the only change is the decay
    opt.step()
    assert torch.allclose(w.detach(), before * (1 - 0.1 * 0.5))
    described = optimizers.describe(spec)
    assert described["decoupled_weight_decay"]["value"] == 0.5
    assert "weight_decay" not in described["hyperparameters"]
    assert optimizers.check(spec) == []
    assert optimizers.check(OptimizerSpec(name="signmom:SignMomentum", lr=0.1)) == []


def test_weight_decay_still_goes_to_an_optimizer_that_takes_it():
    w = torch.nn.Parameter(torch.ones(2, 2))  # a matrix: decayed under the default rule (optimizer.decay: matrices)
    opt = optimizers.build_optimizer(OptimizerSpec(name="adamw", lr=0.1, weight_decay=0.5), [w])
    assert opt.param_groups[0]["weight_decay"] == 0.5 and not opt._optimizer_step_pre_hooks
    assert "decoupled_weight_decay" not in optimizers.describe(OptimizerSpec(name="adamw", lr=0.1, weight_decay=0.5))


def test_an_algo_error_names_algo_not_a_set_the_user_never_typed(sign_module):
    (sign_module / "nolr.py").write_text("import torch\n\nclass NoLr(torch.optim.Optimizer):\n"
                                        "    def __init__(self, params, momentum=0.9):\n"
                                        "        super().__init__(params, {'momentum': momentum})\n")
    res = CliRunner().invoke(app, ["run", "cv/digits_cnn", "--algo", "nolr:NoLr", "--quiet"])
    assert res.exit_code == 2
    assert "(from --algo nolr:NoLr)" in res.output and "--set optimizer=" not in res.output


@pytest.mark.slow
def test_a_run_with_an_optimizer_without_weight_decay_records_the_decoupled_decay(tmp_path):
    (tmp_path / "signmom.py").write_text(SIGN)
    p = _sh("run", "cv/digits_cnn", "--variant", "tiny", "--algo", "signmom:SignMomentum", "--quiet", "--json",
            "--results", str(tmp_path / "res"), "--threads", "1", PATHS=str(tmp_path), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    (path,) = list((tmp_path / "res").rglob("*.json"))
    result = json.loads(path.read_text())
    algo = result["config"]["algorithm"]
    assert algo["optimizer"]["decoupled_weight_decay"]["value"] == 0.0001  # digits' spec sets 1e-4
    assert result["status"] in ("reached", "budget")


# ---- item 18: env --peak on a loaded host; the NPU column says it never ran on hardware ---------------------


def test_peak_notes_name_a_loaded_host_and_a_far_low_measurement():
    from suite.cli.notes import peak_notes

    assert peak_notes(5e10, 1e11, load=0.5, cores=2) == []
    notes = peak_notes(1.3e9, 1e11, load=9.0, cores=2)
    assert any("the host is loaded (load average 9.0 on 2 cores)" in n for n in notes)
    assert any("1.3% of the table's peak, far below it" in n for n in notes)


def test_env_peak_warns_on_a_loaded_host(monkeypatch):
    import suite.cli.notes as notes

    monkeypatch.setattr(notes, "host_load", lambda: (14.0, 2))
    res = CliRunner().invoke(app, ["env", "--peak", "--threads", "1"])
    assert res.exit_code == 0, res.output
    assert "the host is loaded (load average 14.0 on 2 cores)" in res.output


def test_matrix_says_npu_is_untested_on_hardware_until_a_result_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "400")
    res = CliRunner().invoke(app, ["list", "--matrix", "--json"])
    grid = json.loads(res.output)
    assert grid["cv/digits_cnn"]["npu"]["tested_on_hardware"] is False
    folder = tmp_path / "results" / "ascend-910b-x8" / "cv" / "digits_cnn" / "npu"
    folder.mkdir(parents=True)
    (folder / "20261203T000000Z-abcd1234.json").write_text("{}")
    grid = json.loads(CliRunner().invoke(app, ["list", "--matrix", "--json"]).output)
    assert grid["cv/digits_cnn"]["npu"]["tested_on_hardware"] is True
    assert grid["nlp/topics_gpt"]["npu"].get("tested_on_hardware") is False
    table = CliRunner().invoke(app, ["list", "--matrix"]).output
    # the table's cells wrap at the console's width (seven backend columns): the words, not one line, are the check
    assert "untested on hardware" in " ".join(table.split())


# ---- item 19: a time budget hit on a loaded host is named in the run summary -----------------------------------


def _ran(workload: str, seed: int, status: str, steps: int, load: float | None, end: float | None = None):
    from benchmarks.sim.results import site_result

    r = site_result(workload, "cpu-amd-epyc-2c", seed=seed, status=status, tta_s=None if status != "reached" else 5.0)
    r.steps = steps
    r.hardware.cpu_cores = 2
    r.hardware.load_avg_start = None if load is None else [load, load, load]
    r.hardware.load_avg_end = None if end is None else [end, end, end]
    return r


def test_budget_note_reads_the_load_each_result_recorded(monkeypatch):
    from suite.cli.notes import budget_note

    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.1, 0.1))  # the machine is quiet now
    limits = {"cv/digits_cnn": (60.0, None), "nlp/topics_gpt": (60.0, 350)}  # topics stopped on its steps
    ran = [_ran("cv/digits_cnn", 0, "budget", 50, load=11.5), _ran("cv/digits_cnn", 1, "reached", 30, load=11.5),
           _ran("nlp/topics_gpt", 0, "budget", 350, load=11.5), _ran("cv/digits_cnn", 2, "budget", 50, load=0.5),
           _ran("cv/digits_cnn", 3, "budget", 50, load=None)]
    note = budget_note(ran, limits)
    assert note is not None and "1 run(s) hit their time budget" in note and "cv/digits_cnn seed 0" in note
    assert "topics_gpt" not in note and "seed 2" not in note and "seed 3" not in note  # quiet, or no load recorded
    assert "recorded load average up to 11.5 on 2 cores" in note
    end_loaded = budget_note([_ran("cv/digits_cnn", 4, "budget", 50, load=0.5, end=7.0)], limits)
    assert end_loaded is not None and "up to 7.0 on 2 cores" in end_loaded  # loaded by the end of the run


def test_budget_note_is_silent_for_runs_recorded_quiet_on_a_machine_busy_now(monkeypatch):
    from suite.cli.notes import budget_note

    monkeypatch.setattr(os, "getloadavg", lambda: (30.0, 30.0, 30.0))
    assert budget_note([_ran("cv/digits_cnn", 0, "budget", 50, load=0.5, end=1.5)], {"cv/digits_cnn": (60.0, None)}) is None


def _run_on_a_budget(tmp_path: Path, recorded: float, now: float, monkeypatch) -> str:
    import suite.measure.environment as environment
    import suite.measure.fingerprint as fingerprint
    import suite.measure.host_share as host_share

    monkeypatch.setattr(fingerprint, "load_average", lambda: [recorded, recorded, recorded])
    monkeypatch.setattr(environment, "load_average", lambda: [recorded, recorded, recorded])
    monkeypatch.setattr(os, "getloadavg", lambda: (now, now, now))
    # the load sampled while the clock ran (issue 49's host share) is what the run recorded, not the load now
    monkeypatch.setattr(host_share.HostShare, "sample", lambda self, t: setattr(self, "load_avg_max", [recorded] * 3))
    monkeypatch.setattr("suite.devices.cpu_cores", lambda: 2)
    res = CliRunner().invoke(app, ["run", "cv/digits_cnn", "--no-isolate", "--quiet", "--threads", "1",
                                   "--set", "budget.max_train_s=0.3", "--set", "target.value=0.9999",
                                   "--results", str(tmp_path / "res")])
    assert "budget" in res.output, res.output
    written = next((tmp_path / "res").rglob("*.json"))
    assert json.loads(written.read_text())["hardware"]["load_avg_end"] == [recorded] * 3
    return " ".join(res.output.split())


@pytest.mark.slow
def test_run_summary_names_a_time_budget_hit_on_a_host_the_result_records_as_loaded(tmp_path, monkeypatch):
    text = _run_on_a_budget(tmp_path, recorded=12.0, now=0.1, monkeypatch=monkeypatch)
    assert "hit their time budget (budget.max_train_s) on a loaded host (recorded load average up to 12.0 on 2 " \
           "cores)" in text


@pytest.mark.slow
def test_run_summary_says_nothing_when_the_result_records_a_quiet_host(tmp_path, monkeypatch):
    text = _run_on_a_budget(tmp_path, recorded=0.2, now=12.0, monkeypatch=monkeypatch)
    assert "hit their time budget" not in text

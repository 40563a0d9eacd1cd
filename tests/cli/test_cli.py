"""The command line, run as a user runs it (a child process): exit codes, --json, errors that teach."""

from __future__ import annotations

import json
import subprocess

from support.backend_util import env as subprocess_env
from support.faults import cli


def sh(*args: str, timeout: float = 300):
    return subprocess.run(cli(*args), capture_output=True, text=True, env=subprocess_env(), timeout=timeout)


def test_help_teaches():
    p = sh("--help")
    assert p.returncode == 0
    for cmd in ("run", "list", "env", "results", "spec"):
        assert cmd in p.stdout
    assert "--set" in sh("run", "--help").stdout


def test_run_json_writes_valid_results(tmp_path):
    p = sh("run", "cv/digits_cnn", "--seeds", "2", "--results", str(tmp_path), "--json", "--threads", "1")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert [r["seed"] for r in rows] == [0, 1]
    assert all(r["status"] == "reached" for r in rows)
    assert "init ..." in p.stderr and "reached after" in p.stderr  # progress on stderr, data on stdout
    v = sh("results", "validate", str(tmp_path))
    assert v.returncode == 0 and "2 valid, 0 invalid" in v.stdout
    show = sh("results", "show", str(tmp_path), "--json")
    assert len(json.loads(show.stdout)) == 2


def test_set_override_is_recorded(tmp_path):
    # two steps: the promise is the record, not the training (the tiny variant's 40 steps once ran past its
    # 120 s watchdog window under a CPU hog, at step 21)
    p = sh("run", "cv/digits_cnn", "--variant", "tiny", "--set", "optimizer.lr=0.01", "--set", "budget.max_steps=2",
           "--results", str(tmp_path), "--json", "--quiet")
    assert p.returncode == 0, p.stderr
    [row] = json.loads(p.stdout)
    assert row["status"] == "budget" and row["steps"] == 2, row  # ended by the step budget it was given
    data = json.loads(open(row["path"]).read())
    assert data["config"]["overrides"] == {"optimizer.lr": 0.01, "budget.max_steps": 2}
    assert data["config"]["spec"]["optimizer"]["lr"] == 0.01 and data["config"]["variant"] == "tiny"
    assert data["config"]["spec"]["budget"]["max_steps"] == 2  # the override beat the variant's 40


def test_bad_input_exits_2_and_names_the_problem(tmp_path):
    p = sh("run", "cv/nosuch")
    assert p.returncode == 2 and "no workload 'cv/nosuch'" in p.stderr
    p = sh("run", "cv/digits_cnn", "--set", "optimizer.lr=-1")
    assert p.returncode == 2 and "optimizer.lr: Input should be greater than 0" in p.stderr
    p = sh("run", "cv/digits_cnn", "--set", "lr")
    assert p.returncode == 2 and "expected KEY=VALUE" in p.stderr
    p = sh("run", "cv/digits_cnn", "--precision", "fp8")
    assert p.returncode == 2 and "--precision" in p.stderr
    p = sh("run", "cv/digits_cnn", "--backend", "tensorflow")
    assert p.returncode == 2 and "unknown backend 'tensorflow'" in p.stderr
    p = sh("run")
    assert p.returncode == 2 and "name a workload" in p.stderr
    assert not any(tmp_path.iterdir())


def test_user_spec_file_runs(tmp_path):
    spec = (tmp_path / "mine.yaml")
    from support.tests_paths import DIGITS

    spec.write_text(DIGITS.read_text().replace("val_size: 360", "val_size: 300")
                    .replace("name: cv/digits_cnn", "name: cv/test_mine"))  # a user's copy has a name of its own
    p = sh("run", str(spec), "--variant", "tiny", "--results", str(tmp_path / "r"), "--json", "--quiet")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)[0]["status"] == "budget"


def test_failed_run_exits_1_but_is_recorded(tmp_path):
    # --threads 1: with torch's default (a thread per core) on two busy cores, digits took more than its 60 s
    # budget before its third step (a full-suite run under a hog): the run ended `budget` before the fault, exit 0
    env = subprocess_env(FAULT_AT_STEP="3")
    p = subprocess.run(cli("run", "cv/digits_cnn", "--set", "task=support.faults:RaiseAt", "--results", str(tmp_path),
                           "--json", "--quiet", "--threads", "1"), capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 1, p.stdout[-2000:]
    assert json.loads(p.stdout)[0]["status"] == "error"
    assert len(list(tmp_path.rglob("*.json"))) == 1


def test_list_env_and_schema(tmp_path):
    p = sh("list", "--json")
    assert p.returncode == 0 and any(r["name"] == "cv/digits_cnn" for r in json.loads(p.stdout))
    e = sh("env", "--json")
    info = json.loads(e.stdout)
    assert info["backends"]["torch"]["available"] is True and info["hardware"]["cpu_cores"] >= 1
    out = tmp_path / "schema.json"
    assert sh("spec", "schema", "--out", str(out)).returncode == 0
    assert json.loads(out.read_text())["title"] == "WorkloadSpec"

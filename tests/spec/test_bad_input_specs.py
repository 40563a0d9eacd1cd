"""Bad and hostile specs, overrides and flags: each is a clear error naming the file and the field, never a crash,
never a side effect, never a result file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from support.faults import DIGITS, digits_data, sh
from typer.testing import CliRunner

from suite.cli import app
from suite.spec import MAX_SPEC_BYTES, SpecError, parse_override
from suite.specload import load_spec, validate_spec


def _spec_with(tmp_path: Path, edit, name: str = "bad.yaml") -> Path:
    data = digits_data()
    data["name"] = "cv/test_digits_copy"  # a copy outside workloads/ may not claim the built-in name
    edit(data)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _set(path: str, value):
    def edit(data):
        node = data
        *parents, last = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return edit


def _drop(path: str):
    def edit(data):
        *parents, last = path.split(".")
        node = data
        for p in parents:
            node = node[p]
        del node[last]
    return edit


# (edit, the field the error must name, words it must say)
BAD_FIELDS = {
    "unknown top-level key": (_set("optimiser", {"lr": 1}), "optimiser", "unknown field"),
    "unknown nested key": (_set("budget.max_train_secs", 5), "budget.max_train_secs", "unknown field"),
    "unknown model field": (_set("model.chanels", [4]), "model.chanels", "unknown field"),
    "unknown data field": (_set("data.val_sise", 3), "data.val_sise", "unknown field"),
    "unknown backend option": (_set("backends", {"torch": {"grad_clipp": 1.0}}), "backends.torch.grad_clipp",
                               "unknown field"),
    "unknown backend": (_set("backends", {"tensorflow": {}}), "backends.tensorflow", "unknown backend"),
    "missing field": (_drop("target"), "target", "Field required"),
    "lr not a number": (_set("optimizer.lr", "fast"), "optimizer.lr", "valid number"),
    "fractional steps": (_set("eval.every_steps", 2.5), "eval.every_steps", "valid integer"),
    "budget not a mapping": (_set("budget", 60), "budget", "valid dictionary"),
    "tiers a string": (_set("tiers", "smoke"), "tiers", "valid set"),
    "tiers nested list": (_set("tiers", [["smoke"]]), "tiers.0", "Input should be"),
    "unknown tier": (_set("tiers", ["gold"]), "tiers.0", "'smoke', 'standard' or 'full'"),
    "backend option wrong type": (_set("backends", {"torch": {"grad_clip": "big"}}), "backends.torch.grad_clip",
                                  "valid number"),
    "negative train budget": (_set("budget.max_train_s", -1), "budget.max_train_s", "greater than 0"),
    "zero steps": (_set("budget.max_steps", 0), "budget.max_steps", "greater than 0"),
    "negative init budget": (_set("budget.max_init_s", -5), "budget.max_init_s", "greater than 0"),
    "negative watchdog": (_set("budget.watchdog_s", -1), "budget.watchdog_s", "greater than 0"),
    "infinite budget": (_set("budget.max_train_s", float("inf")), "budget.max_train_s", "finite number"),
    "NaN learning rate": (_set("optimizer.lr", float("nan")), "optimizer.lr", "finite number"),
    "negative batch": (_set("data.batch_size", -64), "data.batch_size", "greater than 0"),
    "path traversal in name": (_set("name", "../../etc"), "name", "no '..'"),
    "traversal inside name": (_set("name", "cv/../../etc"), "name", "no '..'"),
    "absolute name": (_set("name", "/etc/passwd"), "name", "no absolute paths"),
    "upper-case name": (_set("name", "cv/Digits"), "name", "lower-case"),
    "traversal in data set": (_set("data.name", "../../etc/passwd"), "data", "unknown data set"),
    "traversal in model": (_set("model.arch", "../../x"), "model", "unknown model arch"),
    "import path to a non-component": (_set("model.arch", "os:system"), "model", "has no pydantic Config"),
    "empty module name": (_set("task", ":Task"), "task", "cannot import module ''"),
    "relative import": (_set("task", "..x:Task"), "task", "cannot import module '..x'"),
    "missing module": (_set("task", "nosuch_pkg.mod:Task"), "task", "No module named 'nosuch_pkg'"),
    "variant not a mapping": (_set("variants", {"tiny": 5}), "variants", "must map each variant name"),
}


@pytest.mark.parametrize("case", list(BAD_FIELDS))
def test_bad_field_names_file_and_field(tmp_path, case):
    edit, field, words = BAD_FIELDS[case]
    path = _spec_with(tmp_path, edit)
    variant = "tiny" if case == "variant not a mapping" else None
    with pytest.raises(SpecError) as e:
        load_spec(path, variant=variant)
    lines = str(e.value).splitlines()
    hit = [ln for ln in lines if ln.startswith(f"{path}: {field}: ")]
    assert hit and any(words in ln for ln in hit), str(e.value)


# (file content, words the error must say)
BAD_FILES = {
    "python tag": ("a: !!python/object/apply:os.system ['touch {marker}']\n", "not valid YAML (only plain YAML"),
    "python name tag": ("a: !!python/name:os.system\n", "could not determine a constructor"),
    "custom tag": ("a: !Ref x\n", "could not determine a constructor"),
    "duplicate key": ("name: cv/a\nname: cv/b\n", "duplicate key 'name'"),
    "nested duplicate": ("optimizer:\n  lr: 1\n  lr: 2\n", "duplicate key 'lr'"),
    "unhashable key": ("? [a, b]\n: 1\n", "a mapping key must be a plain value"),
    "billion laughs": ("a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                       "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                       "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
                       "values once YAML aliases are expanded"),
    "deep nesting": ("a: " + "[" * 20_000 + "]" * 20_000 + "\n", "nested too deeply"),
    "giant integer": ("version: " + "9" * 5000 + "\n", "not valid YAML"),
    "64-bit overflow": ("version: 0x" + "f" * 40 + "\n", "does not fit in 64 bits"),
    "bad timestamp": ("a: !!timestamp nope\n", "not valid YAML"),
    "list at top": ("- a\n- b\n", "top level must be a mapping"),
    "scalar at top": ("just text\n", "top level must be a mapping"),
    "empty file": ("", "top level must be a mapping"),
    "tabs": ("a:\n\tb: 1\n", "not valid YAML"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_yaml_is_refused_without_side_effects(tmp_path, case):
    marker = tmp_path / "pwned"
    content, words = BAD_FILES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(content.format(marker=marker) if "{marker}" in content else content)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert str(e.value).startswith(f"{path}: ") and words in str(e.value), str(e.value)
    assert not marker.exists()  # safe loading: no tag ever runs code


def test_odd_files_are_refused_by_name(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * MAX_SPEC_BYTES + "\n")
    sparse = tmp_path / "sparse.yaml"  # 10 GB on paper: refused by its size, never read
    with open(sparse, "wb") as f:
        f.truncate(10 * 1024**3)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: \xff\xfe\x00\x01")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # reading it would block forever
    cases = {
        big: f"a spec may be at most {MAX_SPEC_BYTES} bytes", sparse: "a spec may be at most",
        binary: "not UTF-8 text", fifo: "not a file", tmp_path: "not a file", tmp_path / "nope.yaml": "no such file",
        Path("/dev/zero"): "not a file", Path("bad\x00name.yaml"): "no such file",
    }
    for path, words in cases.items():
        with pytest.raises(SpecError) as e:
            load_spec(path)
        assert str(e.value).startswith(f"{path}: ") and words in str(e.value), (path, str(e.value))


BAD_OVERRIDES = {
    "lr": "expected KEY=VALUE",
    "=1": "the key must be a dotted field path",
    "optimizer..lr=1": "the key must be a dotted field path",
    "optimizer.lr=[": "not valid YAML",
    "optimizer.lr=!!python/object/apply:os.getcwd []": "not valid YAML",
    "optimizer.lr=&a [*a]": "values once YAML aliases are expanded",  # a list that contains itself
}


@pytest.mark.parametrize("text", list(BAD_OVERRIDES))
def test_bad_override_syntax(text):
    with pytest.raises(SpecError) as e:
        parse_override(text)
    assert str(e.value).startswith("--set") and BAD_OVERRIDES[text] in str(e.value)


@pytest.mark.parametrize("override,field,words", [
    ("name=../../etc", "name", "no '..'"),
    ("budget.max_train_s=-1", "budget.max_train_s", "greater than 0"),
    ("budget.max_train_s=.inf", "budget.max_train_s", "finite number"),
    ("optimizer.lr.x=1", "optimizer.lr", "cannot set optimizer.lr.x"),
    ("model.channels=many", "model.channels", "valid list"),
    ("task=os:system", "task", "is a builtin_function_or_method, not a Workload class"),
])
def test_bad_override_values_name_the_field(override, field, words):
    key, value = parse_override(override)
    with pytest.raises(SpecError) as e:
        load_spec(DIGITS, {key: value})
    assert f": {field}" in str(e.value) and words in str(e.value), str(e.value)


def test_validate_spec_refuses_non_mappings():
    for data in (None, [], "x", 3):
        with pytest.raises(SpecError, match="top level must be a mapping"):
            validate_spec(data, "api")  # type: ignore[arg-type]


# ---- the CLI: exit 2, a message that names the problem, no traceback, nothing written ----------------------


@pytest.mark.parametrize("args,words", [
    (["run", "/etc/passwd"], "no workload '/etc/passwd'"),  # only .yaml/.yml paths are read as specs
    (["run", "../../etc/passwd"], "no workload '../../etc/passwd'"),
    (["run", "../../etc"], "no workload '../../etc'"),
    (["run", "cv/digits_cnn", "--set", "name=../../etc"], "name: Value error"),
    (["run", "cv/digits_cnn", "--set", "optimizer.lr=!!python/object/apply:os.system [id]"], "not valid YAML"),
    (["run", "cv/digits_cnn", "--variant", "nosuch"], "no variant 'nosuch' (this spec has: tiny)"),
    (["run", "cv/digits_cnn", "--tier", "gold"], "--tier 'gold'"),
    (["run", "cv/digits_cnn", "--seeds", "0"], "--seeds"),
    (["run", "cv/digits_cnn", "--nproc", "0"], "--nproc"),
    (["run", "cv/digits_cnn", "--backend", "../../x"], "unknown backend"),
])
def test_cli_bad_input_exits_2(tmp_path, args, words):
    """In-process (typer's runner) to keep it quick; test_cli_spec_validate_names_each_bad_file runs a real child."""
    res = tmp_path / "res"
    r = CliRunner().invoke(app, [*args, "--results", str(res)])
    assert r.exit_code == 2, (r.stdout, r.stderr, r.exception)
    assert words in r.stderr
    assert r.exception is None or isinstance(r.exception, SystemExit)  # an exit code, not a crash
    assert not res.exists() or not list(res.rglob("*.json"))


def test_cli_results_folder_that_cannot_be_written_fails_before_running(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    p = sh("run", "cv/digits_cnn", "--variant", "tiny", "--results", str(blocker / "res"))
    assert p.returncode == 2 and "cannot write result files there" in p.stderr
    assert "init ..." not in p.stderr  # refused before any run started


def test_cli_spec_validate_names_each_bad_file(tmp_path):
    a = _spec_with(tmp_path, _set("budget.max_train_s", -1), "a.yaml")
    b = tmp_path / "b.yaml"
    b.write_text("a: !!python/object/apply:os.system ['id']\n")
    p = sh("spec", "validate", str(a), str(b), str(DIGITS))
    assert p.returncode == 2
    assert f"{a}: budget.max_train_s: Input should be greater than 0" in p.stderr
    assert f"{b}: not valid YAML" in p.stderr and f"ok {DIGITS}" in p.stdout

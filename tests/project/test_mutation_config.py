"""`make mutation` names only things that exist: every file, test file and function in pyproject's [tool.mutmut]
and scripts/mutation_targets.txt (a restructure once left it pointing at suite/github.py, which had become a
package, and mutmut silently mutated nothing there). Fast: reads files and parses ASTs, runs no mutmut."""

from __future__ import annotations

import ast
import fnmatch
import re
import tomllib
from pathlib import Path

from support.promised import require

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ROOT / "scripts" / "mutation_targets.txt"
SEP = "ǁ"  # mutmut's class separator in mangled names
NAME = re.compile(rf"^(?P<module>[\w.]+)\.x(?:_(?P<func>\w+?)|{SEP}(?P<cls>\w+){SEP}(?P<method>\w+?|\*))"
                  r"(?:__mutmut_\*)?$")


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]


def _targets() -> list[str]:
    lines = (ln.strip() for ln in TARGETS.read_text(encoding="utf-8").splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]


def _defined(tree: ast.Module) -> tuple[set[str], dict[str, set[str]]]:
    funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    classes = {n.name: {m.name for m in n.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)}
               for n in tree.body if isinstance(n, ast.ClassDef)}
    return funcs, classes


def test_the_mutmut_config_names_existing_files():
    cfg = _config()
    for key in ("source_paths", "also_copy"):
        for rel in cfg[key]:
            assert (ROOT / rel).exists(), f"pyproject [tool.mutmut] {key}: {rel} does not exist"
    for pattern in cfg["only_mutate"]:
        hits = [p for p in ROOT.glob("suite/**/*.py") if fnmatch.fnmatch(p.relative_to(ROOT).as_posix(), pattern)]
        assert hits, f"pyproject [tool.mutmut] only_mutate: {pattern} matches no file (moved? renamed?)"
    args = cfg["pytest_add_cli_args_test_selection"]
    paths = [a for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or args[i - 1] != "-k")]
    assert paths, "no test files selected"
    for a in paths:
        assert (ROOT / a.split("::")[0]).is_file(), f"pyproject [tool.mutmut] test selection: {a} does not exist"


def test_every_mutation_target_is_an_existing_function_in_a_mutated_file():
    only = _config()["only_mutate"]
    targets = _targets()
    assert len(targets) >= 20, targets
    for t in targets:
        m = NAME.match(t)
        assert m, f"{TARGETS.name}: {t!r} is not a mutmut name (module.x_func__mutmut_* or module.x{SEP}Cls{SEP}*)"
        rel = m["module"].replace(".", "/") + ".py"
        path = ROOT / rel
        assert path.is_file(), f"{TARGETS.name}: {t}: {rel} does not exist"
        assert any(fnmatch.fnmatch(rel, p) for p in only), f"{TARGETS.name}: {t}: {rel} is not in only_mutate"
        funcs, classes = _defined(ast.parse(path.read_text(encoding="utf-8")))
        if m["func"]:
            assert m["func"] in funcs, f"{TARGETS.name}: {t}: no function {m['func']} at module level of {rel}"
        else:
            assert m["cls"] in classes, f"{TARGETS.name}: {t}: no class {m['cls']} in {rel}"
            assert m["method"] == "*" or m["method"] in classes[m["cls"]], f"{t}: no method {m['method']}"


def test_every_file_mutmut_mutates_has_a_target():
    """A file in only_mutate with no target costs mutant generation and is scored by nothing."""
    modules = {NAME.match(t)["module"] for t in _targets()}  # type: ignore[index]
    for pattern in _config()["only_mutate"]:
        assert pattern.removesuffix(".py").replace("/", ".") in modules, f"only_mutate {pattern}: no target in it"


def test_the_target_names_follow_the_installed_mutmut():
    """The names are mutmut's own mangling (a mutmut upgrade that changes it must fail here, not mutate nothing)."""
    templates = require("mutmut.mutation.trampoline_templates")
    assert templates.CLASS_NAME_SEPARATOR == SEP
    assert templates.mangle_function_name(name="write_atomic", class_name=None) == "x_write_atomic"
    assert templates.mangle_function_name(name="__call__", class_name="_TokenAuth") == f"x{SEP}_TokenAuth{SEP}__call__"


def test_the_script_and_make_read_the_target_list():
    script = (ROOT / "scripts" / "mutation.sh").read_text()
    code = [ln for ln in script.splitlines() if not ln.lstrip().startswith("#")]
    assert "scripts/mutation_targets.txt" in script, "mutation.sh must read the target list"
    assert not [ln for ln in code if "__mutmut_" in ln], "targets belong in scripts/mutation_targets.txt"
    assert "scripts/mutation.sh" in (ROOT / "Makefile").read_text()


# the tests that pin the clock, which the harness's mutants must meet (the selection's `-k` once said "not clock
# and not steady", which deselected every one of them)
CLOCK_TESTS = [
    "tests/project/test_promises.py::test_the_clock_starts_before_the_first_batch_is_touched",
    "tests/project/test_promises.py::test_the_clock_never_pauses_for_evaluation",
    "tests/project/test_promises.py::test_steady_throughput_leaves_out_the_slow_first_step",
    "tests/harness/test_harness.py::test_reached_on_real_digits",
    "tests/harness/test_harness.py::test_budget_by_time",
    "tests/harness/test_harness.py::test_init_hands_the_workload_what_it_needs_and_is_recorded_off_the_clock",
    "tests/execution/test_init_limit.py::test_a_real_init_is_killed_past_the_scaled_mlperf_limit_and_not_before",
    "tests/harness/test_throughput.py::test_the_cpu_clock_times_work_not_waits",
]


def _selected(args: list[str], test_id: str) -> bool:
    """Whether pytest would run test_id with these selection arguments: its file named, and `-k` (matched as
    pytest matches it: a case-insensitive substring of the test's name or of its file's) keeps it."""
    from _pytest.mark.expression import Expression

    path, name = test_id.split("::")
    files = [a for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or args[i - 1] != "-k")]
    if path not in files:
        return False
    words = [name.lower(), Path(path).name.lower()]
    ks = [args[i + 1] for i, a in enumerate(args) if a == "-k"]
    return all(Expression.compile(k).evaluate(lambda sub, **_: any(sub.lower() in w for w in words)) for k in ks)


def test_the_tests_that_pin_the_clock_judge_the_harness_mutants():
    cfg = _config()
    assert "suite/harness.py" in cfg["only_mutate"]
    assert "suite.harness.xǁRunǁ_run__mutmut_*" in _targets()
    args = cfg["pytest_add_cli_args_test_selection"]
    for test_id in CLOCK_TESTS:
        path, name = test_id.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), f"{test_id} no longer exists"
        assert _selected(args, test_id), f"{test_id} is not run for mutmut's mutants (pyproject [tool.mutmut])"
    # the reader can say no: the old selection left every one of them out
    old = [*args[:-2], "-k", "not clock and not steady and not cli"]
    assert not any(_selected(old, t) for t in CLOCK_TESTS[:3])

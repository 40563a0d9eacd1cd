"""Hang guards nest: a test's pytest timeout lies above every child `timeout=` it waits on (docs/testing.md).

A child's `timeout=` is a hang guard sized for a loaded machine; when the test's own pytest timeout (pyproject's
600 s unless the test or its module marks another) is below it, pytest stops a slow but healthy child first, and
the test fails for time, without the child's output (a CPU-hog run of the suite lost three tests that way). Read
from the source: literal numbers and module constants built from them, in the test, in the helpers it calls
(its own module's and the `from <tests module> import` ones, one level deep) and their `timeout` defaults. A
guard computed at run time (`run_hang_guard_s(...)`) is not read; its test's mark uses the same figure.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
INI_TIMEOUT_S = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["timeout"]


class Module:
    def __init__(self, path: Path):
        self.path = path
        self.tree = ast.parse(path.read_text())
        self.consts: dict[str, float] = {}
        self.functions = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}
        self.imported: dict[str, Path] = {}  # helper name -> the file of the tests module it comes from
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and (found := _tests_module(node.module, path)):
                self.imported.update({a.asname or a.name: found for a in node.names})
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = self.value(node.value)
                for target in targets:
                    if isinstance(target, ast.Name) and value is not None:
                        self.consts[target.id] = value

    def value(self, node: ast.AST) -> float | None:
        """A number from literals, this module's constants and + - * (None: only known at run time)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id in self.imported and node.id not in self.consts:  # a constant of another tests module
                return module(self.imported[node.id]).consts.get(node.id)
            return self.consts.get(node.id)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "float") \
                and len(node.args) == 1:
            return self.value(node.args[0])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
            left, right = self.value(node.left), self.value(node.right)
            if left is None or right is None:
                return None
            return {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}[type(node.op)]
        return None

    def timeout_mark(self, decorators: list[ast.expr]) -> float | None:
        for d in decorators:
            if isinstance(d, ast.Call) and ast.unparse(d.func) == "pytest.mark.timeout" and d.args:
                return self.value(d.args[0])
        return None

    def module_timeout(self) -> float | None:
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                    for t in node.targets):
                marks = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
                return self.timeout_mark(list(marks))
        return None


def _tests_module(name: str, importer: Path) -> Path | None:
    """The file of a tests module an import names: `support.x` (tests/support/x.py) or a test module beside the
    importer (`from test_layouts import ...` in tests/backends/); None for anything else."""
    candidates = [TESTS.joinpath(*name.split(".")).with_suffix(".py"), importer.parent / f"{name}.py"]
    return next((c for c in candidates if c.is_file()), None)


_modules: dict[Path, Module] = {}


def module(path: Path) -> Module:
    if path not in _modules:
        _modules[path] = Module(path)
    return _modules[path]


def helper_guards(mod: Module, fn: ast.FunctionDef, passed: float | None) -> list[tuple[float, str]]:
    """The guards inside a helper: its `timeout=` keywords, its `timeout` parameter's default unless the call
    passed one (`passed`)."""
    args = fn.args
    defaults = dict(zip([a.arg for a in args.args][len(args.args) - len(args.defaults):], args.defaults,
                        strict=True))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None})
    found = []
    for node in ast.walk(fn):
        for kw in getattr(node, "keywords", []) if isinstance(node, ast.Call) else []:
            if kw.arg != "timeout":
                continue
            if isinstance(kw.value, ast.Name) and kw.value.id == "timeout":  # the helper's own parameter
                value = passed if passed is not None else (mod.value(defaults["timeout"]) if "timeout" in defaults
                                                           else None)
            else:
                value = mod.value(kw.value)
            if value is not None:
                found.append((value, f"{mod.path.name}:{node.lineno} in {fn.name}"))
    return found


def guards_of(mod: Module, test: ast.FunctionDef) -> list[tuple[float, str]]:
    found = helper_guards(mod, test, None)
    for node in ast.walk(test):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        given = [k.value for k in node.keywords if k.arg == "timeout"]
        if given and mod.value(given[0]) is None:
            continue  # a guard computed at run time (its test's mark uses the same figure)
        passed = mod.value(given[0]) if given else None
        name = node.func.id
        if name in mod.functions and name != test.name:
            found += helper_guards(mod, mod.functions[name], passed)
        elif name in mod.imported:
            other = module(mod.imported[name])
            if name in other.functions:
                found += helper_guards(other, other.functions[name], passed)
    return found


def nesting_violations() -> list[str]:
    bad = []
    for path in sorted(TESTS.rglob("test_*.py")):
        mod = module(path)
        default = mod.module_timeout() or INI_TIMEOUT_S
        for fn in mod.tree.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_")):
                continue
            limit = mod.timeout_mark(fn.decorator_list) or default
            for guard, where in guards_of(mod, fn):
                if guard >= limit:
                    bad.append(f"{path.name}::{fn.name}: a child guard of {guard:g} s ({where}) is not below "
                               f"its pytest timeout of {limit:g} s")
    return bad


def test_every_child_guard_is_below_its_tests_pytest_timeout():
    assert nesting_violations() == []


def test_the_reader_sees_a_guard_above_the_timeout(tmp_path, monkeypatch):
    """The check can fail: a test whose child waits up to 900 s under pyproject's 600 s, directly and through
    a helper's default, is reported; the same test with a mark above its guard is not."""
    source = (
        "import subprocess\n"
        "GUARD_S = 900\n"
        "def helper(timeout=GUARD_S):\n"
        "    return subprocess.run(['true'], timeout=timeout)\n"
        "def test_direct():\n"
        "    subprocess.run(['true'], timeout=GUARD_S)\n"
        "def test_through_a_helper():\n"
        "    helper()\n"
        "def test_passes_a_short_one():\n"
        "    helper(timeout=30)\n"
        "@pytest.mark.timeout(GUARD_S + 60)\n"
        "def test_marked_above():\n"
        "    helper()\n"
    )
    (tmp_path / "test_fake.py").write_text(source)
    monkeypatch.setattr(f"{__name__}.TESTS", tmp_path)
    monkeypatch.setattr(f"{__name__}._modules", {})
    bad = nesting_violations()
    assert [line.split(":")[2] for line in bad] == ["test_direct", "test_through_a_helper"], bad

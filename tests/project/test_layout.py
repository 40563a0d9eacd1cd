"""The layout shows the architecture (issue 29): suite/ is concept packages with few loose modules, each package
says what it owns; tests/ mirrors suite/'s packages, with the helpers in one support package."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE, TESTS = ROOT / "suite", ROOT / "tests"
LOOSE_MODULES_AT_MOST = 8  # spec, specload, registry, harness, throughput, devices, distributed (+ room for one)
# test folders that are not a suite/ package or module: the repository's own promises, the shared helpers, specs
NOT_A_PACKAGE = {"project", "support"}


def test_suite_has_few_loose_modules_and_every_package_says_what_it_owns():
    loose = sorted(p.name for p in SUITE.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= LOOSE_MODULES_AT_MOST, loose
    for init in SUITE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc, f"{init.relative_to(ROOT)} has no docstring saying what the package owns"


def test_every_test_lives_in_the_folder_of_what_it_tests():
    assert not list(TESTS.glob("test_*.py")), "a test file directly in tests/: put it in the folder of its package"
    suite_names = {p.name for p in SUITE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    suite_names |= {p.stem for p in SUITE.glob("*.py")}
    for folder in TESTS.iterdir():
        if folder.is_dir() and folder.name not in NOT_A_PACKAGE and not folder.name.startswith((".", "__")):
            assert folder.name in suite_names, f"tests/{folder.name}/ is named after no suite/ package or module"


def test_test_file_names_are_unique():
    """pytest imports test modules by their file name (rootdir-relative 'prepend' mode, no __init__.py)."""
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []


def test_helpers_are_in_the_support_package_not_beside_the_tests():
    for path in TESTS.rglob("*.py"):
        rel = path.relative_to(TESTS)
        if rel.parts[0] in ("support",) or path.name == "conftest.py":
            continue
        assert path.name.startswith("test_"), f"tests/{rel} is a helper: move it to tests/support/"


def test_a_test_module_imports_test_modules_of_its_own_folder_only():
    """pytest puts each test file's own folder on sys.path: `from test_x import ...` works beside test_x only;
    what two folders share belongs in tests/support/."""
    for path in TESTS.rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("test_"):
                assert (path.parent / f"{node.module}.py").is_file(), \
                    f"{path.relative_to(ROOT)} imports {node.module}, which is not beside it: share it via support/"


def test_benchmarks_import_no_test_helper_and_each_shared_builder_is_one() -> None:
    """Issue 43: a benchmark imports no test helper (what both need lives in benchmarks/sim/), there is one Result
    factory (every other builder calls it), one fault module and one throw-away git repository helper."""
    for path in (ROOT / "benchmarks").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "from support" not in text and '"tests")' not in text, f"{path.relative_to(ROOT)} imports a test helper"
    constructors = []
    for path in [*TESTS.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Result":
                constructors.append(path.relative_to(ROOT).as_posix())
    assert constructors == ["benchmarks/sim/results.py"], constructors
    support = {p.name for p in (TESTS / "support").glob("*.py")}
    assert not support & {"faulty.py", "executor_faults.py", "ab_repo.py", "bisect_repo.py", "compare_factory.py"}

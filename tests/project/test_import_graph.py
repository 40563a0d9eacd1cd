"""The import graph of suite/ (built with ast: module-level, function-level AND annotation-only `if TYPE_CHECKING:`
imports of suite modules) has no circles, and suite/spec/ is pure: it imports no suite module (no registry, no
user code). An annotation-only circle runs nothing, but it says a type sits in the wrong module (issue 29).

Every package's docstring says what it may import ("May import: ... Never: ..."); those sentences are the rules
checked here (tests/support/import_rules.py), on every kind of import, and an import that bends one says why at the
import (`# layer: <reason>`). Issue 43."""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path

import pytest
from support import import_rules
from support.import_graph import SUITE, Edge, import_graph

ROOT = Path(__file__).resolve().parents[2]
real_graph = cache(import_graph)  # the tree's graph, built once for the tests that read it (the copies build their own)

# function-level (late) import circles that are accepted, each with the reason; a new one must be added here
# with its reason or removed. None are left (see docs/architecture.md, "No import circles").
ALLOWED_LATE_CYCLES: dict[frozenset[str], str] = {}

# the imports that bend their package's rules, each with its `# layer:` reason at the import; keep these few
MAX_BENDS = 4  # lora_text's base model is two of them: the Llama's config module and its model module


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def _describe(comp: list[str], edges: list[Edge]) -> str:
    inside = [e for e in edges if e.source in comp and e.target in comp]
    kind = lambda e: "annotation only" if e.annotation else "module level" if e.module_level else "late"  # noqa: E731
    return "\n".join(f"  {e.source} -> {e.target} ({kind(e)}, line {e.line})" for e in inside)


def test_the_graph_sees_both_kinds_of_import() -> None:
    edges = real_graph()
    assert any(e.source == "suite.specload" and e.target == "suite.registry" and e.module_level for e in edges)
    assert any(e.source == "suite.registry" and e.target == "suite.backends.base" and not e.module_level
               for e in edges)  # a late import inside backend_class


def test_no_import_circle_among_module_level_imports() -> None:
    edges = [e for e in real_graph() if e.module_level]
    found = cycles(edges)
    assert not found, "module-level import circles:\n" + "\n\n".join(_describe(c, edges) for c in found)


def test_the_graph_sees_annotation_only_imports() -> None:
    edges = real_graph()
    assert any(e.source == "suite.backends.base" and e.target == "suite.workloads.contract" and e.annotation
               for e in edges)


def test_no_import_circle_through_late_or_annotation_only_imports_either() -> None:
    edges = real_graph()
    found = [c for c in cycles(edges) if frozenset(c) not in ALLOWED_LATE_CYCLES]
    assert not found, ("import circles through function-level imports (fix them, or add one to "
                       "ALLOWED_LATE_CYCLES with the reason; an annotation-only one: move the type to where its "
                       "concept lives):\n" + "\n\n".join(_describe(c, edges) for c in found))


def test_spec_is_pure() -> None:
    def in_spec(module: str) -> bool:
        return module == "suite.spec" or module.startswith("suite.spec.")

    imported = sorted({e.target for e in real_graph() if in_spec(e.source) and not in_spec(e.target)})
    assert imported == [], f"suite/spec/ imports {imported}; it must import no other suite module (no registry, no user code)"


def test_no_test_imports_the_tests_folder_as_a_package() -> None:
    """veRL 0.9.1's wheel installs a top-level `tests` package into site-packages: `tests.x` may resolve there in a
    worker, so the tests share helpers through tests/support on the path (`support.x`), never as `tests.x`."""
    import re

    pattern = re.compile(r"^\s*(from|import)\s+tests\.", re.M)
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py")
                 if pattern.search(p.read_text(encoding="utf-8"))]
    assert offenders == [], f"import helpers as support.<module>, not tests.<module>: {offenders}"


# ---- the rules the docstrings write (issue 43) ----------------------------------------------------------------------


def _listed(found: list[tuple[Edge, import_rules.Rules]]) -> str:
    return "\n".join(f"  {e.source}:{e.line} imports {e.target}, which {r.owner}'s docstring does not allow "
                     f"(May import: {', '.join(r.allowed) or 'nothing'}; Never: {', '.join(r.never) or '-'})"
                     for e, r in found)


def test_every_package_states_its_rules() -> None:
    """Every top-level package and module of suite/ says what it may import (suite.spec: test_spec_is_pure holds it
    to nothing, whatever its docstring says)."""
    rules = import_rules.declared()
    modules = {".".join(p.relative_to(SUITE.parent).with_suffix("").parts) for p in SUITE.glob("*.py")}
    packages = {p for p in import_rules.packages() if p.count(".") == 1}
    tops = sorted((modules | packages) - {"suite.__init__", "suite.spec"})
    assert len(tops) >= 20, tops
    missing = [p for p in tops if p not in rules]
    assert not missing, f"packages and modules whose docstring has no \"May import: ...\" sentence: {missing}"
    for p in import_rules.packages()[1:]:  # [0] is suite itself
        assert import_rules.rules_for(p, rules) is not None, p
    for r in rules.values():
        assert not set(r.allowed) & set(r.never), f"{r.owner}: a name both allowed and never: {r}"
        for name in r.allowed + r.never:
            assert name == "suite" or (SUITE.parent / (name.replace(".", "/") + ".py")).is_file() or \
                (SUITE.parent / name.replace(".", "/") / "__init__.py").is_file(), f"{r.owner}'s rules name {name}: no such module"


def test_the_rules_read_as_written() -> None:
    rules = import_rules.declared()
    assert rules["suite.data"].allowed == ("suite.registry",)
    assert "suite.models" in rules["suite.data"].never
    assert rules["suite.results"].allowed == ()  # "May import: no other suite package"
    assert "suite.data.rl" not in rules  # says no rules of its own: inherits suite.data's
    assert import_rules.rules_for("suite.data.rl.gsm8k", rules) is rules["suite.data"]
    assert "suite.models" in rules["suite.data.synthetic"].allowed  # its own: it writes model folders
    assert rules["suite.studies"].permits("suite.execution.launch")
    assert not rules["suite.studies"].permits("suite.site.charts")
    assert rules["suite.site"].permits("suite.studies.report") and not rules["suite.site"].permits("suite.studies.runner")


def test_every_import_keeps_its_packages_rules() -> None:
    found = import_rules.violations(real_graph())
    assert not found, ("imports against the rules their package's docstring writes (move the shared piece to a "
                       "layer both may import, or write `# layer: <reason>` at the import):\n" + _listed(found))


def test_the_bends_are_few_and_each_says_why() -> None:
    bent = import_rules.bends(real_graph())
    assert len(bent) <= MAX_BENDS, "imports that bend a rule: " + ", ".join(f"{e.source}:{e.line}" for e in bent)


@pytest.fixture
def suite_copy(tmp_path):
    shutil.copytree(SUITE, tmp_path / "suite", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "suite"


def _append(path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


LATE = "\n\ndef _late():\n    {}\n"


def test_a_forbidden_import_added_to_a_copy_fails(suite_copy) -> None:
    """Negative control: data readers that import a model (data's docstring says Never: `suite.models`), one in each
    kind of import the graph sees, are each reported, with the rules of suite.data."""
    line = "from suite.models.vision import cnn"
    _append(suite_copy / "data" / "vision" / "digits.py", "\n" + line + "\n")
    _append(suite_copy / "data" / "vision" / "cifar10.py", LATE.format(line))
    _append(suite_copy / "data" / "vision" / "fashion_mnist.py",
            "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    " + line + "\n")
    # a subpackage is held to its own rules where it states them: suite.data.synthetic may import models, not
    # backends; one that states none inherits its parent's (suite.data.rec)
    _append(suite_copy / "data" / "synthetic" / "files.py", LATE.format("from suite.models.vision import cnn"))
    _append(suite_copy / "data" / "synthetic" / "overrides.py", LATE.format("from suite.backends import base"))
    _append(suite_copy / "data" / "rec" / "movielens.py", LATE.format("from suite.workloads.contract import Context"))
    found = import_rules.violations(import_graph(suite_copy), suite_copy)
    assert sorted((e.source, e.target, r.owner) for e, r in found) == [
        ("suite.data.rec.movielens", "suite.workloads.contract", "suite.data"),
        ("suite.data.synthetic.overrides", "suite.backends.base", "suite.data.synthetic"),
        ("suite.data.vision.cifar10", "suite.models.vision.cnn", "suite.data"),
        ("suite.data.vision.digits", "suite.models.vision.cnn", "suite.data"),
        ("suite.data.vision.fashion_mnist", "suite.models.vision.cnn", "suite.data")]
    kinds = {e.source: (e.module_level, e.annotation) for e, _ in found}
    assert kinds["suite.data.vision.digits"] == (True, False)
    assert kinds["suite.data.vision.cifar10"] == (False, False)
    assert kinds["suite.data.vision.fashion_mnist"] == (False, True)


def test_a_bend_is_accepted_only_with_its_reason_at_the_import(suite_copy) -> None:
    _append(suite_copy / "data" / "vision" / "digits.py",
            LATE.format("from suite.models.vision import cnn  # layer: a test's reason"))
    _append(suite_copy / "data" / "vision" / "cifar10.py",
            LATE.format("from suite.models.vision import cnn  # a comment that gives no layer reason"))
    edges = import_graph(suite_copy)
    assert [e.source for e, _ in import_rules.violations(edges, suite_copy)] == ["suite.data.vision.cifar10"]
    assert "suite.data.vision.digits" in [e.source for e in import_rules.bends(edges, suite_copy)]

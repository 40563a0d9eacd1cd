"""The import graph of suite/ (built with ast: module-level, function-level AND annotation-only `if TYPE_CHECKING:`
imports of suite modules) has no circles, and suite/spec.py is pure: it imports no suite module (no registry, no
user code). An annotation-only circle runs nothing, but it says a type sits in the wrong module (issue 29)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suite"

# function-level (late) import circles that are accepted, each with the reason; a new one must be added here
# with its reason or removed. None are left (see docs/architecture.md, "No import circles").
ALLOWED_LATE_CYCLES: dict[frozenset[str], str] = {}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    module_level: bool
    line: int
    annotation: bool = False  # under `if TYPE_CHECKING:` (never executed)


def _modules() -> dict[str, Path]:
    out = {}
    for path in SUITE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """`suite.a.b.c` -> the longest prefix that is a module of suite/ (c may be a name inside suite.a.b)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> list[Edge]:
    modules = _modules()
    edges: list[Edge] = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]

        def visit(node: ast.AST, module_level: bool, name: str = name, package: str = package,
                  annotation: bool = False) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    visit(child, False, annotation=True)  # annotations only: never executed, but still a circle
                    continue
                targets: list[str] = []
                if isinstance(child, ast.Import):
                    targets = [a.name for a in child.names]
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        up = package.split(".")[: len(package.split(".")) - child.level + 1]
                        base = ".".join(up + ([child.module] if child.module else []))
                    targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in child.names]
                for t in targets:
                    resolved = _resolve(t, modules) if t.startswith("suite") else None
                    if resolved and resolved != name:
                        edges.append(Edge(name, resolved, module_level, child.lineno, annotation))
                inner = module_level and not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                visit(child, inner, annotation=annotation)

        visit(ast.parse(path.read_text(encoding="utf-8")), True)
    return edges


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
    edges = import_graph()
    assert any(e.source == "suite.specload" and e.target == "suite.registry" and e.module_level for e in edges)
    assert any(e.source == "suite.registry" and e.target == "suite.backends.base" and not e.module_level
               for e in edges)  # a late import inside backend_class


def test_no_import_circle_among_module_level_imports() -> None:
    edges = [e for e in import_graph() if e.module_level]
    found = cycles(edges)
    assert not found, "module-level import circles:\n" + "\n\n".join(_describe(c, edges) for c in found)


def test_the_graph_sees_annotation_only_imports() -> None:
    edges = import_graph()
    assert any(e.source == "suite.backends.base" and e.target == "suite.workloads.contract" and e.annotation
               for e in edges)


def test_no_import_circle_through_late_or_annotation_only_imports_either() -> None:
    edges = import_graph()
    found = [c for c in cycles(edges) if frozenset(c) not in ALLOWED_LATE_CYCLES]
    assert not found, ("import circles through function-level imports (fix them, or add one to "
                       "ALLOWED_LATE_CYCLES with the reason; an annotation-only one: move the type to where its "
                       "concept lives):\n" + "\n\n".join(_describe(c, edges) for c in found))


def test_spec_is_pure() -> None:
    imported = sorted({e.target for e in import_graph() if e.source == "suite.spec"})
    assert imported == [], f"suite/spec.py imports {imported}; it must import no suite module (no registry, no user code)"

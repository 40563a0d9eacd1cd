"""The import graph of suite/, built with ast: module-level, function-level and annotation-only (`if TYPE_CHECKING:`)
imports of suite modules, one Edge each. Used by tests/project/test_import_graph.py and the readers' layering test."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suite"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    module_level: bool
    line: int
    annotation: bool = False  # under `if TYPE_CHECKING:` (never executed)


def _modules(suite: Path = SUITE) -> dict[str, Path]:
    out = {}
    for path in suite.rglob("*.py"):
        parts = path.relative_to(suite.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """`suite.a.b.c` -> the longest prefix that is a module of suite/ (c may be a name inside suite.a.b)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(suite: Path = SUITE) -> list[Edge]:
    """Every import of a suite module by a suite module under `suite` (a copy of the package, in the rules' test)."""
    modules = _modules(suite)
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

"""Every name of suite/ has one import path (issue 43): no module re-exports what another owns (a `noqa: F401`
import from a suite module, or an imported name in `__all__`). A package's __init__ may define its public API
(suite/spec/, suite/github/): that is the package's one path, not a second one."""

from __future__ import annotations

import ast
from pathlib import Path

SUITE = Path(__file__).resolve().parents[2] / "suite"


def reexports(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    tree = ast.parse(text)
    imported: set[str] = set()
    found = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("suite"):
            names = {a.asname or a.name for a in node.names}
            imported |= names
            if "noqa: F401" in lines[node.lineno - 1]:
                found.append(f"line {node.lineno}: `noqa: F401` import of {sorted(names)} from {node.module}")
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            listed = {e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)}
            if listed & imported:
                found.append(f"line {node.lineno}: __all__ lists imported names {sorted(listed & imported)}")
    return found


def test_no_module_re_exports_another_modules_names() -> None:
    found = {str(p.relative_to(SUITE.parent)): r for p in sorted(SUITE.rglob("*.py"))
             if p.name != "__init__.py" and (r := reexports(p))}
    assert not found, f"re-exports (import the name from its owner instead): {found}"


def test_the_check_finds_a_shim(tmp_path: Path) -> None:
    shim = tmp_path / "shim.py"
    shim.write_text("from suite.results.stats import figures_of  # noqa: F401 - re-exported\n"
                    "from suite.results.record import Result\n__all__ = ['Result']\n")
    assert len(reexports(shim)) == 2

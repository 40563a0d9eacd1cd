"""The import rules written in suite's docstrings, read and checked against the import graph (issue 43).

A package's docstring (or a top-level module's) states its rules in one sentence that reads as prose and parses:

    May import: `suite.spec`, `suite.registry` (why, if it needs saying). Never: `suite.backends`, `suite.results`.

Only backticked `suite...` names count; "May import: no other suite package." allows none. A subpackage without such
a sentence inherits its parent's rules (most say "May import what `suite.x` may."). A rule covers the imports that
leave the package's top-level package (suite.data.rl -> suite.data.base is the package's own business). A name is
allowed when it lies under an allowed prefix and under no longer "Never" prefix. An import that must bend a rule
carries `# layer: <reason>` on its line (or the line above it); the test accepts nothing else.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from support.import_graph import SUITE, Edge

MAY = re.compile(r"May import:(?P<may>.*?)(?:Never:(?P<never>.*?))?(?:\n\s*\n|$)", re.S)
NAME = re.compile(r"`(suite(?:\.\w+)*)`")
BEND = re.compile(r"#\s*layer:\s*\S")


@dataclass(frozen=True)
class Rules:
    owner: str  # the module or package whose docstring says them
    allowed: tuple[str, ...]
    never: tuple[str, ...]

    def permits(self, target: str) -> bool:
        def depth(prefixes: tuple[str, ...]) -> int:
            hits = [p.count(".") + 1 for p in prefixes if target == p or target.startswith(p + ".")]
            return max(hits, default=0)

        may = depth(self.allowed)
        return may > 0 and may > depth(self.never)


def _modules(suite: Path) -> dict[str, Path]:
    out = {}
    for path in suite.rglob("*.py"):
        parts = path.relative_to(suite.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def parse(docstring: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(allowed, never) from a docstring's "May import: ... Never: ..." sentence; None when it has none."""
    m = MAY.search(docstring)
    if m is None:
        return None
    return tuple(NAME.findall(m["may"])), tuple(NAME.findall(m["never"] or ""))


def declared(suite: Path = SUITE) -> dict[str, Rules]:
    """The rules each package (and each top-level module) of `suite` writes in its own docstring."""
    out = {}
    for name, path in _modules(suite).items():
        if path.name != "__init__.py" and path.parent != suite:
            continue  # rules are a package's (or a top-level module's), never a plain module's
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if (rules := parse(doc)) is not None:
            out[name] = Rules(name, *rules)
    return out


def packages(suite: Path = SUITE) -> list[str]:
    return sorted(name for name, path in _modules(suite).items() if path.name == "__init__.py")


def rules_for(module: str, rules: dict[str, Rules]) -> Rules | None:
    """The rules that govern `module`: its own, else its nearest enclosing package's (a subpackage inherits)."""
    name = module
    while name:
        if name in rules:
            return rules[name]
        name = name.rpartition(".")[0]
    return None


def _top(module: str) -> str:
    return ".".join(module.split(".")[:2])


def bent(edge: Edge, suite: Path = SUITE) -> bool:
    """The import carries `# layer: <reason>` on its line or the line above."""
    path = _modules(suite)[edge.source]
    lines = path.read_text(encoding="utf-8").splitlines()
    near = lines[max(edge.line - 2, 0): edge.line]
    return any(BEND.search(line) for line in near)


def violations(edges: list[Edge], suite: Path = SUITE) -> list[tuple[Edge, Rules]]:
    """Every import that leaves its top-level package against the rules that govern it, without a written reason."""
    rules = declared(suite)
    out = []
    for e in edges:
        if e.target == "suite" or _top(e.source) == _top(e.target):
            continue
        governing = rules_for(e.source, rules)
        if governing is None or governing.permits(e.target):
            continue
        if not bent(e, suite):
            out.append((e, governing))
    return out


def bends(edges: list[Edge], suite: Path = SUITE) -> list[Edge]:
    """The imports that need their `# layer:` reason (the rules would refuse them), one per import statement."""
    rules = declared(suite)
    out: list[Edge] = []
    for e in edges:
        if e.target == "suite" or _top(e.source) == _top(e.target):
            continue
        governing = rules_for(e.source, rules)
        if governing is not None and not governing.permits(e.target) and bent(e, suite) and \
                (e.source, e.line) not in {(o.source, o.line) for o in out}:
            out.append(e)
    return out

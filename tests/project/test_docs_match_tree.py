"""Docs that cannot drift (issue 43, point 4): docs/architecture.md's tables and tree are checked against the real
tree of suite/ (every module named once, every path named exists, every package in the tree once), and no document
points out of the repository (a user's clone has no ../shared). README's tier table and docs/workloads.md's catalog
are checked against the registry in test_one_source_of_truth.py."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCH = ROOT / "docs" / "architecture.md"
TOP = ("suite/", "tests/", "benchmarks/", "scripts/", "docs/", "site/", "workloads/", "baselines/", "studies/",
       ".github/", "constraints/")


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end)]


def _first_cells(text: str) -> list[str]:
    return [line.split("|")[1] for line in text.splitlines()
            if line.startswith("| ") and not re.fullmatch(r"\|[\s:|-]+", line) and "folder / module" not in line]


def named_modules(text: str) -> Counter[str]:
    """The suite modules a table's first cells name: `suite/a/b.py`, or a bare `c.py` after a path in the same cell
    (its folder), or a folder `suite/a/b/` (its package, __init__.py). A package's data (`suite/site/templates/`, an
    .html file) is no module: test_every_path_architecture_names_exists checks it is there."""
    named: Counter[str] = Counter()
    for cell in _first_cells(_section(text, "## Where things live", "## The structure")):
        folder = None
        for token in re.findall(r"`([^`]+)`", cell):
            token = token.strip()
            if token.startswith("suite/"):
                if not token.endswith(".py") and (ROOT / token).exists() and not (ROOT / token / "__init__.py").exists():
                    continue  # a data file or folder in the package (templates, assets): a path, checked below
                if token.endswith("/"):
                    folder = token
                    named[token + "__init__.py"] += 1
                else:
                    folder = token.rsplit("/", 1)[0] + "/"
                    named[token] += 1
            elif folder and re.fullmatch(r"[a-z_0-9]+\.py", token):
                named[folder + token] += 1
    return named


def real_modules() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / "suite").rglob("*.py")
            if p.name != "__main__.py" and "__pycache__" not in p.parts}


def test_architecture_names_every_suite_module_once_and_nothing_that_is_not_there() -> None:
    named = named_modules(ARCH.read_text())
    twice = {m: n for m, n in named.items() if n > 1}
    assert not twice, f"docs/architecture.md names these in two rows: {twice}"
    real = real_modules()
    missing = sorted(m for m in real - set(named) if not m.endswith("__init__.py")
                     and m.rsplit("/", 1)[0] + "/__init__.py" not in named)
    assert not missing, f"docs/architecture.md has no row for: {missing}"
    gone = sorted(set(named) - real)
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"


def test_every_path_architecture_names_exists() -> None:
    text = ARCH.read_text()
    missing = []
    for token in set(re.findall(r"`([^`\s]+)`", text)):
        path = token.split("::")[0].split(":")[0].rstrip(",.")
        if not path.startswith(TOP) or "<" in path:
            continue
        if not (list(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()):
            missing.append(token)
    assert not missing, f"docs/architecture.md names paths that do not exist: {sorted(missing)}"


def test_the_structure_tree_lists_each_package_once_and_every_package() -> None:
    tree = _section(ARCH.read_text(), "## The structure", "## Decisions").split("```")[1]
    listed = re.findall(r"^  ([a-z_]+)/", tree, re.M)
    listed += [m for line in re.findall(r"^  [a-z_]+/.*$", tree, re.M) for m in re.findall(r"\b([a-z_]+)/", line)[1:]
               if (ROOT / "suite" / m).is_dir()]
    assert not {k: n for k, n in Counter(listed).items() if n > 1}, Counter(listed)
    packages = {p.name for p in (ROOT / "suite").iterdir() if (p / "__init__.py").exists()}
    assert set(listed) == packages, (sorted(packages - set(listed)), sorted(set(listed) - packages))


def test_no_document_points_out_of_the_repository() -> None:
    """A user's clone has no ../shared and no /work: a link or path there is dead for everyone but us."""
    bad = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = doc.read_text()
        for n, line in enumerate(text.splitlines(), 1):
            if re.search(r"\.\./shared|/work/|/root/", line):
                bad.append(f"{doc.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            if not (doc.parent / target).resolve().is_relative_to(ROOT) or not (doc.parent / target).exists():
                bad.append(f"{doc.relative_to(ROOT)}: link to {target}")
    assert not bad, "\n".join(bad)


def test_the_checks_fail_on_a_duplicated_or_missing_row() -> None:
    """Negative controls: the same checks on an edited copy of the page."""
    text = ARCH.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `suite/harness"))
    doubled = text.replace(row, row + "\n" + row, 1)
    assert any(n > 1 for n in named_modules(doubled).values())
    dropped = text.replace(row + "\n", "", 1)
    assert set(named_modules(text)) - set(named_modules(dropped))

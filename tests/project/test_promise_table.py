"""The breakage table still points at real code and real tests: scripts/break_promises.py (which breaks each
documented promise on a scratch copy and expects its test to fail) and docs/testing.md's table of the same.

Running the breakages is slow (real training; `python scripts/break_promises.py`). This fast test catches the
way they rot: a restructure moves the text a breakage edits (DEFAULT_NOISE_FLOOR left compare.py for
compare_model.py, so the breakage became STALE) or renames a test the table names.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "testing.md"


def _breakages() -> list:
    spec = importlib.util.spec_from_file_location("break_promises", ROOT / "scripts" / "break_promises.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module.BREAKAGES


def _test_exists(node_id: str) -> bool:
    """`tests/<package>/test_x.py::name`, or a bare `test_x.py::name` (test file names are unique under tests/)."""
    file, _, name = node_id.partition("::")
    found = [ROOT / file] if "/" in file else list((ROOT / "tests").rglob(file))
    if len(found) != 1:
        return False
    path = found[0]
    return path.is_file() and re.search(rf"^def {re.escape(name)}\(", path.read_text(), re.M) is not None


def test_every_breakage_still_applies_exactly_once():
    for b in _breakages():
        text = (ROOT / b.file).read_text()
        assert text.count(b.old) == 1, (f"breakage {b.name}: its text is in {b.file} {text.count(b.old)} times, not "
                                        "once; the promise moved: update scripts/break_promises.py and docs/testing.md")


def test_every_test_a_breakage_names_exists_and_is_in_the_doc_table():
    rows = [ln for ln in DOC.read_text().splitlines() if ln.startswith("|")]
    for b in _breakages():
        row = next((r for r in rows if f"`{b.name}`" in r), None)
        assert row is not None, f"docs/testing.md: no table row names the breakage `{b.name}`"
        for node_id in b.tests:
            assert _test_exists(node_id), f"breakage {b.name}: {node_id} does not exist"
            assert node_id.split("::")[1] in row, f"docs/testing.md: the row of `{b.name}` does not name {node_id}"


def test_every_test_the_doc_names_exists():
    named = re.findall(r"`((?:tests/)?test_\w+\.py::test_\w+)", DOC.read_text())
    assert len(named) >= 10, named
    missing = [n for n in named if not _test_exists(n)]
    assert not missing, f"docs/testing.md names tests that do not exist: {missing}"

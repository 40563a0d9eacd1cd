"""The recipe pages (docs/recipes/<name>.md, issue 49 point 2): every block marked `<!-- runnable -->` runs here as
written, one line a command, in a fresh folder with an empty $TRAINBENCH_DATA (a fresh clone's state). A line's
trailing `# exits N: why` is the exit code the page promises (the tiny model cannot reach a full target). A page that
says which MLLOG keys the official checker rejects on its tiny run (`<!-- mllog check rejects: KEY, ... -->`, none:
accepted) has that checked on the log its block wrote. docs/recipes/slurm_example.md is run against a real Slurm
(tests/execution/test_slurm_example.py), not here."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from support.backend_util import ROOT, env
from support.mllog_rules import failed_rules

PAGES = sorted(p for p in (ROOT / "docs" / "recipes").glob("*.md") if p.stem != "slurm_example")
BLOCK = re.compile(r"<!-- runnable -->\s*```bash\n(.*?)```", re.S)
REJECTS = re.compile(r"<!-- mllog check rejects:([^>]*)-->")


def _commands(page: Path) -> list[tuple[str, int]]:
    out = []
    for block in BLOCK.findall(page.read_text()):
        for line in block.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            expected = re.search(r"#\s*exits (\d+)", line)
            out.append((line, int(expected.group(1)) if expected else 0))
    return out


def test_every_full_mlperf_recipe_has_a_page_with_runnable_commands() -> None:
    assert [p.stem for p in PAGES] and all(_commands(p) for p in PAGES)
    for page in PAGES:
        text = page.read_text()
        assert any(f"{domain}/{page.stem}" in text for domain in ("nlp", "cv", "rl", "rec"))
        assert "--synthetic" in text and "mllog check" in text and "--nproc" in text and "slurm" in text.lower()


@pytest.mark.timeout(960)  # above its children's 900 s guard (tests/project/test_hang_guards.py)
@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_a_recipe_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    # `trainbench` is this checkout's CLI (the console script of the shared venv may point at another one)
    prelude = f'trainbench() {{ {shlex.quote(sys.executable)} -m suite.cli "$@"; }}\n'
    for line, expected in _commands(page):
        done = subprocess.run(["bash", "-c", prelude + line], capture_output=True, text=True, cwd=tmp_path,
                              env=env(TRAINBENCH_DATA=str(tmp_path / "data"), COLUMNS="200"), timeout=900)
        assert done.returncode == expected, f"{page.name}: `{line}` exited {done.returncode}\n{done.stderr[-3000:]}"
    said = REJECTS.search(page.read_text())
    if said:  # the keys the page names are the ones the official checker rejects on the log the block wrote
        check = next(line for line, _ in _commands(page) if "mllog check" in line).split("#")[0] + " --json"
        done = subprocess.run(["bash", "-c", prelude + check], capture_output=True, text=True, cwd=tmp_path,
                              env=env(TRAINBENCH_DATA=str(tmp_path / "data")), timeout=900)
        verdict = json.loads(done.stdout)
        keys = {k.strip() for k in said.group(1).split(",") if k.strip()}
        assert failed_rules(verdict["messages"]) == keys and verdict["passed"] == (not keys), (
            f"{page.name}: the checker's messages\n" + "\n".join(verdict["messages"]))

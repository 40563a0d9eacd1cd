"""The recipe pages (docs/recipes/<name>.md, issue 49 point 2): every block marked `<!-- runnable -->` runs here as
written, one line a command, in a fresh folder with an empty $TRAINBENCH_DATA (a fresh clone's state). A line's
trailing `# exits N: why` is the exit code the page promises (the tiny model cannot reach a full target)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from support.backend_util import ROOT, env

PAGES = sorted((ROOT / "docs" / "recipes").glob("*.md"))
BLOCK = re.compile(r"<!-- runnable -->\s*```bash\n(.*?)```", re.S)


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
        assert f"nlp/{page.stem}" in text or f"cv/{page.stem}" in text or f"rl/{page.stem}" in text
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

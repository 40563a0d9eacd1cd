"""A site page is one folder (suite/site/pages/<page>/: its Python and its templates) plus one line in PAGES, and the
templates are package data: a wheel built from the repository builds the site with no checkout beside it (issue 43)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from suite.site import pages

ROOT = Path(__file__).resolve().parents[2]
PAGES_DIR = ROOT / "suite" / "site" / "pages"


def test_every_page_folder_is_registered_once_and_template_names_are_unique() -> None:
    folders = sorted(p.name for p in PAGES_DIR.iterdir() if (p / "__init__.py").is_file())
    assert sorted(pages.PAGES) == folders and len(set(pages.PAGES)) == len(pages.PAGES)
    names = [t.name for t in PAGES_DIR.glob("*/*.html")] + [t.name for t in (ROOT / "suite/site/templates").glob("*.html")]
    assert len(names) == len(set(names)), sorted(names)  # one ChoiceLoader over every folder: a name means one file
    assert pages.PAGES[-1] == "index"  # a reader who sees the new index finds every page it links
    assert [m.__name__.rsplit(".", 1)[1] for m in pages.whole_site_pages()][-1] == "index"


BUILD = """
import sys
from pathlib import Path
import suite
from suite.site.build import build_site
sys.path.insert(0, sys.argv[3])
from support.site_factory import write_standard
assert Path(suite.__file__).is_relative_to(Path(sys.argv[1])), suite.__file__
write_standard(Path(sys.argv[2]) / "results")
rep = build_site(Path(sys.argv[2]) / "results", Path(sys.argv[2]) / "out")
print(rep.pages)
"""


@pytest.mark.slow
def test_a_wheel_builds_the_site_without_a_checkout(tmp_path: Path) -> None:
    """pyproject's package-data ships the shared templates, the assets and every page folder's templates: a wheel of
    the package, unpacked away from the repository, builds the same site files as the checkout (names and bytes)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "suite", src / "suite", ignore=shutil.ignore_patterns("__pycache__"))
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("*.whl"))
    unpacked = tmp_path / "installed"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(unpacked)
        shipped = set(z.namelist())
    for f in [*PAGES_DIR.glob("*/*.html"), *(ROOT / "suite/site/templates").iterdir(),
              *(ROOT / "suite/site/static").iterdir(), ROOT / "suite/studies/study.html"]:
        assert f.relative_to(ROOT).as_posix() in shipped, f
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": f"{unpacked}{os.pathsep}{ROOT}",
                                                                        "TRAINBENCH_INDEX": "0"}
    # the repository is on the path only for the test's fixture (benchmarks.sim); suite must come from the wheel
    p = subprocess.run([sys.executable, "-c", BUILD, str(unpacked), str(tmp_path / "w"), str(ROOT / "tests")],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    from support.site_factory import write_standard

    from suite.site.build import build_site

    write_standard(tmp_path / "c" / "results")
    build_site(tmp_path / "c" / "results", tmp_path / "c" / "out", use_index=False)
    a, b = tmp_path / "w" / "out", tmp_path / "c" / "out"

    def published(site: Path) -> list[str]:  # the pages and copies; the manifest (dot files) names its build's paths
        return sorted(f.relative_to(site).as_posix() for f in site.rglob("*")
                      if f.is_file() and not any(part.startswith(".") for part in f.relative_to(site).parts))

    files = published(a)
    assert len(files) > 20 and files == published(b)
    assert [f for f in files if (a / f).read_bytes() != (b / f).read_bytes()] == []
    assert "Content-Security-Policy" in (a / "index.html").read_text()

"""An install that fits a runner (issue 49, point 7): the distribution's name is ours, the demo needs only the core
and the `demo` extra, the GPU-runner set is named, and veRL's stray `tests` package cannot shadow ours."""

from __future__ import annotations

import importlib.metadata as md
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from support.stray_tests import TESTS

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_distribution_is_not_the_unrelated_trainbench_on_pypi_and_no_doc_installs_that():
    """`trainbench` on PyPI is someone else's 2018 project (0.0.2): a doc or an error saying `pip install
    'trainbench[x]'` would install it. The command stays `trainbench`."""
    assert PROJECT["name"] == "trainbench-suite"
    assert PROJECT["scripts"] == {"trainbench": "suite.cli:main"}
    bad = re.compile(r"pip install (-\S+ )*['\"]?trainbench(\[|['\"\s]|$)")
    offenders = []
    for folder in ("suite", "docs", "scripts", "benchmarks", ".github"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".md", ".sh", ".yml", ".yaml") and path.is_file():
                offenders += [f"{path.relative_to(ROOT)}: {line.strip()}" for line in path.read_text().splitlines()
                              if bad.search(line)]
    offenders += [f"README.md: {line}" for line in (ROOT / "README.md").read_text().splitlines() if bad.search(line)]
    assert not offenders, offenders


def test_the_extras_name_an_engine_each_and_a_gpu_runner_set():
    extras = PROJECT["optional-dependencies"]
    for name in ("deepspeed", "megatron", "torchtitan", "verl", "ray", "dali", "demo", "gpu", "dev"):
        assert name in extras, name
    names = {Requirement(r).name for r in extras["gpu"]}
    # every engine a CUDA runner runs, and nothing only the tests need
    assert {"deepspeed", "megatron-core", "torchtitan", "ray", "nvidia-dali-cuda120"} <= names
    assert not names & {"pytest", "playwright", "mutmut", "ruff", "torch-npu", "verl"}
    assert {Requirement(r).name for r in extras["demo"]} == {"gymnasium"}


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_installs_the_demo_set_and_make_test_the_dev_set(tmp_path):
    """What `make` would run in a fresh venv (`make -n`: printed, nothing executed): the demo installs the core and
    `[demo]`, never the dev set; `make test` the dev set; a dev install already there spares the demo's."""
    venv = f"VENV={tmp_path / 'venv'}"
    demo = subprocess.run(["make", "-n", "demo", venv], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert demo.returncode == 0, demo.stderr
    assert '-e ".[demo]"' in demo.stdout and ".[dev]" not in demo.stdout, demo.stdout
    assert re.search(r"if \[ ! -e \S+/\.installed-", demo.stdout), "a dev install is reused"
    test = subprocess.run(["make", "-n", "test", venv], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert test.returncode == 0 and '-e ".[dev]"' in test.stdout, test.stderr


def _closure(requirements: list[str]) -> set[str]:
    """The installed distributions that `requirements` pull in, transitively (markers evaluated, extras not followed
    except those named)."""
    todo = [Requirement(r) for r in requirements]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        if name in seen:
            continue
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            continue  # not installed here: nothing of it can be imported anyway
        seen.add(name)
        for sub in dist.requires or []:
            r = Requirement(sub)
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                todo.append(Requirement(str(r).split(";")[0]))
    return seen


# a child's sitecustomize: site-packages leaves sys.path and a folder of links to the allowed distributions' files
# takes its place, so a child sees what a virtual environment holding only the core and the `demo` extra holds
# (find_spec finds nothing else, importlib.metadata lists nothing else); every child the CLI starts inherits it
LEAN_SITE = textwrap.dedent("""
    import sys
    sys.path[:] = [p for p in sys.path if not p.endswith("site-packages")] + [{lean!r}]
""")


def lean_site(folder: Path, allowed: set[str]) -> Path:
    """Links to every top-level file or folder the `allowed` distributions installed (modules, .libs, .dist-info)."""
    lean = folder / "site-packages-lean"
    lean.mkdir(parents=True)
    for dist in md.distributions():
        if re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower() not in allowed:
            continue
        base = Path(dist.locate_file(""))
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            if (base / top).exists() and not (lean / top).exists() and not top.endswith(".pth"):
                (lean / top).symlink_to(base / top)
    custom = folder / "sitecustomize"
    custom.mkdir()
    (custom / "sitecustomize.py").write_text(LEAN_SITE.format(lean=str(lean)))
    return custom


@pytest.mark.slow  # the smoke tier's tiny variants and the site, in children (~40 s quiet)
def test_the_demo_runs_on_the_core_and_the_demo_extra_alone(tmp_path):
    """Every smoke workload (tiny variant) runs and the site builds where only the core's and the `demo` extra's
    distributions (and what they pull in) are importable; a module outside the set fails in the same children (the
    negative control)."""
    # this project itself (installed under its old name or its new one: `suite` is ours)
    allowed = _closure(PROJECT["dependencies"] + PROJECT["optional-dependencies"]["demo"]) | {"trainbench",
                                                                                               "trainbench-suite"}
    assert "torch" in allowed and "gymnasium" in allowed and "deepspeed" not in allowed
    site = lean_site(tmp_path, allowed)
    env = {"PYTHONPATH": f"{site}:{ROOT}", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(Path.home()),
           "COLUMNS": "200"}
    probe = subprocess.run([sys.executable, "-c", "import gymnasium, torch, duckdb; import deepspeed"],
                           capture_output=True, text=True, env=env)
    assert probe.returncode != 0 and "No module named 'deepspeed'" in probe.stderr, probe.stderr[-1000:]
    results = tmp_path / "results"
    run = subprocess.run([sys.executable, "-m", "suite.cli", "run", "--tier", "smoke", "--variant", "tiny", "--results",
                          str(results), "--json"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
    built = subprocess.run([sys.executable, "-m", "suite.cli", "site", "build", "--results", str(results), "--out",
                            str(tmp_path / "site")], capture_output=True, text=True, env=env, cwd=tmp_path,
                           timeout=600)
    assert built.returncode == 0 and (tmp_path / "site" / "index.html").is_file(), built.stderr[-3000:]


def test_verls_stray_tests_package_cannot_shadow_ours(tmp_path):
    """`import tests` in a plain child (this checkout first on its path) reads veRL's package when veRL is installed
    (the hazard); after support.stray_tests.claim it reads this repository's tests/, whose helpers then import as
    `tests.<module>` (the guard tests/conftest.py applies)."""
    code = textwrap.dedent(f"""
        import importlib, importlib.util, sys
        sys.path.insert(0, {str(TESTS)!r})
        spec = importlib.util.find_spec("tests")
        print("before", spec.origin if spec else None, list(spec.submodule_search_locations or []) if spec else [])
        from support.stray_tests import claim
        print("claimed", claim())
        p = importlib.import_module("tests.support.tests_paths")  # what a `tests.<module>` import would read
        print("after", p.__file__)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["after"] == str(TESTS / "support" / "tests_paths.py")
    try:
        verl_files = [str(f) for f in md.distribution("verl").files or [] if str(f).startswith("tests/__init__")]
    except md.PackageNotFoundError:
        verl_files = []
    if verl_files:  # the hazard is real here: without the guard, `tests` was veRL's
        assert "site-packages" in lines["before"] and lines["claimed"] != "None", done.stdout
    # and in this very process (tests/conftest.py ran claim): ours
    import tests

    assert str(TESTS) in list(tests.__path__)

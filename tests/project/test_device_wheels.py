"""scripts/device/prepare_wheels.py: the wheels a lent GPU machine lacks, and the one command docs/profiling.md
shows for it (issue 29). Offline here: the command, the selection rules, the tag and size checks, and the
offline resolution against a trainbench wheel built from this tree. The real download (PyPI, ~57 MiB) is not
a test (tests reach no network but loopback, conftest.py): the script runs these same checks on what it
downloaded, every time, and exits 1 when one fails."""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("prepare_wheels", ROOT / "scripts" / "device" / "prepare_wheels.py")
prep = importlib.util.module_from_spec(_spec)
sys.modules["prepare_wheels"] = prep
_spec.loader.exec_module(prep)


def documented_command() -> str:
    """The bash block of docs/profiling.md that runs device_check.py on the device."""
    text = (ROOT / "docs" / "profiling.md").read_text()
    blocks = [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "device_check.py" in b]
    assert len(blocks) == 1, blocks
    return blocks[0]


def test_the_docs_show_the_command_the_script_prints():
    command = documented_command()
    assert command == prep.device_command(prep.EXTRAS)
    install, run = command.split(" && ")
    words = shlex.split(install)
    assert words[:4] == ["python3", "-m", "pip", "install"] and "--no-index" in words
    assert words[words.index("--find-links") + 1] == prep.WHEEL_DIR
    assert shlex.split(run)[-2:] == ["--synthetic-data", prep.SYNTHETIC_DIR]
    assert "benchmarks/device_check.py" in run and (ROOT / "benchmarks" / "device_check.py").is_file()


def test_torch_and_cuda_libraries_are_never_carried_but_nvml_is():
    reqs = prep.runtime_requirements(prep.EXTRAS)
    names = {prep.canonical(re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0]) for r in reqs}
    assert "torch" not in names and {"pydantic", "duckdb", "mujoco", "nvidia-ml-py"} <= names
    for name in ("torch", "triton", "nvidia-cublas-cu12", "nvidia-nccl-cu13"):
        assert prep.NEVER.match(name)
    assert not prep.NEVER.match("nvidia-ml-py")
    resolved = [{"name": "torch", "version": "2.11.0", "wheel": "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl"},
                {"name": "numpy", "version": "2.5.5", "wheel": "numpy-2.5.5-cp312-cp312-manylinux_2_28_x86_64.whl"},
                {"name": "duckdb", "version": "2.0.1", "wheel": "duckdb-2.0.1-cp312-abi3-manylinux_2_28_x86_64.whl"},
                {"name": "jinja2", "version": "3.1.6", "wheel": "jinja2-3.1.6-py3-none-any.whl"}]
    # numpy is on the device (compiled: stays there); jinja2 too, but pure Python: carried in case it is too old
    assert [r["name"] for r in prep.select(resolved, {"numpy": None, "jinja2": None})] == ["duckdb", "jinja2"]
    with pytest.raises(SystemExit, match="--extra.*nosuch"):
        prep.runtime_requirements(["nosuch"])


def test_wheels_for_another_python_platform_or_torch_are_refused(tmp_path):
    good = ["pydantic-2.14.4-py3-none-any.whl", "tzdata-2026.6-py2.py3-none-any.whl",
            "duckdb-2.0.1-cp312-abi3-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
            "pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"]
    bad = ["numpy-2.5.5-cp311-cp311-manylinux_2_28_x86_64.whl", "msgspec-0.23.0-cp312-cp312-macosx_11_0_arm64.whl",
           "ruptures-1.1.10-cp312-cp312-manylinux_2_28_aarch64.whl",
           "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl"]
    for name in good + bad:
        (tmp_path / name).write_bytes(b"")
    problems = prep.wheel_problems(tmp_path)
    assert sorted({p.split(":")[0] for p in problems}) == sorted(bad), problems


@pytest.fixture(scope="module")
def own_wheel(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("whl")
    prep.build_own_wheel(dest)
    return dest


def test_the_offline_resolution_needs_every_dependency(own_wheel, tmp_path):
    """Python 3.12, no index: trainbench's wheel plus the device's packages (stand-ins at the lowest versions
    pyproject allows) resolve; take one dependency away and pip names it."""
    wheel = next(own_wheel.glob("trainbench_suite-*.whl"))
    assert wheel.name.endswith("-py3-none-any.whl") and not prep.wheel_problems(own_wheel)
    assert not (ROOT / "build").exists()  # built in a copy: the tree gets no build/ or egg-info
    have = {"torch": "2.11.0"}  # the device's own, left out of the requirements
    for req in prep.runtime_requirements(prep.EXTRAS):
        name = prep.canonical(re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0])
        floor = re.search(r">=\s*([0-9][0-9.]*)", req)
        have[name] = floor.group(1) if floor else "1.0"
    assert prep.resolves_offline(own_wheel, have, [], prep.EXTRAS) is None
    complaint = prep.resolves_offline(own_wheel, {k: v for k, v in have.items() if k != "pydantic"}, [], prep.EXTRAS)
    assert complaint is not None and "pydantic" in complaint

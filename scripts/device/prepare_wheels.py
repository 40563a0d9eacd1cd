"""Build here the wheels a lent GPU machine lacks, so its few minutes go to measuring, not installing (issue 29).

The device machine runs Python 3.12 with torch (+CUDA) and a set of common packages already installed, has no
package registry, and takes at most 64 MiB of files along (the working tree and the wheels together). This
script, run on a machine with PyPI:

1. resolves trainbench's runtime dependencies (pyproject.toml, torch left out) for CPython 3.12 on manylinux
   x86-64, binary wheels only (`pip install --dry-run --report`, metadata only);
2. downloads the wheels of that set that the device lacks (`pip download --no-deps --only-binary=:all:
   --python-version 3.12 --implementation cp --platform manylinux...`): never torch, triton or an nvidia-*
   CUDA library; a compiled package the device image already holds (DEVICE_HAS) is left there, while a
   pure-Python one is carried anyway (small; pip uses it only when the device's copy is too old);
3. builds a wheel of trainbench itself;
4. checks the set: tags fit cp312/manylinux x86-64, no torch/CUDA wheel, wheels + working tree <= 64 MiB,
   and that `pip install trainbench` resolves for Python 3.12 offline from the wheels plus stand-ins for
   the device's packages.

Then, on the device, from the repository root, the one command (device_command; docs/profiling.md shows it):
install offline, run benchmarks/device_check.py with synthetic data of the real formats.

    .venv/bin/python scripts/device/prepare_wheels.py [--dest .whl] [--have-freeze pip-freeze.txt]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT_BYTES = 64 * 2**20  # what the device tool carries: working tree + wheels
PYTHON = "3.12"
PLATFORMS = ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_24_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_28_x86_64", "manylinux1_x86_64"]
TARGET = ["--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp", "--abi", "cp312",
          "--abi", "abi3", "--abi", "none", *[a for p in PLATFORMS for a in ("--platform", p)]]
# the compiled packages of the lent device image ('cuda', its package list read 2026-11-17) that trainbench's
# dependencies need, with the versions a session saw there (None: present, version not read; the offline check
# then assumes what PyPI resolves for 3.12). --have-freeze replaces this with a `pip freeze` taken there.
# the extras device_check.py's full-tier workloads need beyond what the image holds: the tiny HalfCheetah PPO
# (gymnasium, mujoco, imageio). Not 'dali' (a 424 MB CUDA 12 wheel; ImageNet's decode 'auto' falls back without it)
EXTRAS = ["mujoco"]
DEVICE_HAS: dict[str, str | None] = {
    "torch": "2.11.0", "numpy": "2.5.2", "scipy": None, "scikit-learn": None, "pandas": None, "pyyaml": None,
    "markupsafe": None, "charset-normalizer": None, "pillow": None}
NEVER = re.compile(r"^(torch|triton|nvidia-(?!ml-py$).*)$")  # the device's own; nvidia-ml-py is NVML's Python
WHEEL_DIR = ".whl"  # ignored by git; the device tool carries it (carry: [".whl"])
SYNTHETIC_DIR = "/tmp/trainbench-data"


def device_command(extras: list[str]) -> str:
    """Install offline (pip resolves against what the device holds, the wheels fill the gaps), then the check on
    the working tree's code (PYTHONPATH: the wheel of trainbench may be older than the tree)."""
    target = f"'trainbench-suite[{','.join(extras)}]'" if extras else "trainbench-suite"
    return (f"python3 -m pip install -q --no-index --no-compile --find-links {WHEEL_DIR} {target} && "
            f"PYTHONPATH=$PWD python3 benchmarks/device_check.py --synthetic-data {SYNTHETIC_DIR}")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_requirements(extras: list[str], pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """pyproject's [project] dependencies and those of `extras`, torch left out (the device has its CUDA build)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    known = project.get("optional-dependencies", {})
    if unknown := [e for e in extras if e not in known]:
        raise SystemExit(f"prepare_wheels: --extra {unknown}: pyproject.toml's extras are {', '.join(known)}")
    deps = [*project["dependencies"], *[d for e in extras for d in known[e]]]
    return [d for d in deps if not NEVER.match(canonical(re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0]))]


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False)


def resolve(requirements: list[str]) -> list[dict[str, str]]:
    """The full set pip would install for CPython 3.12 manylinux x86-64, as [{name, version, wheel}]."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = pip("install", "--dry-run", "--quiet", "--ignore-installed", "--report", str(report), *TARGET,
                   "--target", str(Path(tmp) / "t"), *requirements)
        if done.returncode:
            raise SystemExit(f"prepare_wheels: pip cannot resolve {requirements} for Python {PYTHON}:\n{done.stderr}")
        rows = json.loads(report.read_text())["install"]
    return [{"name": canonical(r["metadata"]["name"]), "version": r["metadata"]["version"],
             "wheel": r["download_info"]["url"].rsplit("/", 1)[-1]} for r in rows]


def select(resolved: list[dict[str, str]], have: dict[str, str | None]) -> list[dict[str, str]]:
    """What to carry: never torch/triton/CUDA wheels; a compiled package the device holds stays there."""
    pure = [r for r in resolved if r["wheel"].endswith("-none-any.whl")]
    return [r for r in resolved if not NEVER.match(r["name"]) and (r in pure or r["name"] not in have)]


def download(rows: list[dict[str, str]], dest: Path) -> None:
    if not rows:
        return
    done = pip("download", "--no-deps", "--quiet", *TARGET, "-d", str(dest),
               *[f"{r['name']}=={r['version']}" for r in rows])
    if done.returncode:
        raise SystemExit(f"prepare_wheels: pip download failed:\n{done.stderr}")


def build_own_wheel(dest: Path) -> Path:
    for old in dest.glob("trainbench_suite-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:  # a copy: setuptools leaves build/ and *.egg-info where it builds
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(ROOT / name, src / name)
        shutil.copytree(ROOT / "suite", src / "suite", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        done = pip("wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(dest.resolve()), str(src))
    if done.returncode:
        raise SystemExit(f"prepare_wheels: building trainbench's wheel failed:\n{done.stderr}")
    return next(dest.glob("trainbench_suite-*.whl"))


def wheel_problems(dest: Path) -> list[str]:
    """Each wheel's tags must install on CPython 3.12 manylinux x86-64; none may be torch or a CUDA library."""
    problems = []
    for whl in sorted(dest.glob("*.whl")):
        name, _version, *_build, py, abi, plat = whl.name[:-4].split("-")
        if NEVER.match(canonical(name)):
            problems.append(f"{whl.name}: the device has its own torch/CUDA; never carried")
        if not any(t in ("py3", "py2.py3", "cp312") or t.startswith("py3") for t in py.split(".")) and "cp312" not in py:
            problems.append(f"{whl.name}: python tag {py} is not for CPython {PYTHON}")
        if abi not in ("none", "abi3", "cp312"):
            problems.append(f"{whl.name}: ABI {abi} is not CPython {PYTHON}'s")
        if plat != "any" and not all(p.endswith("x86_64") and p.startswith("manylinux") for p in plat.split(".")):
            problems.append(f"{whl.name}: platform {plat} is not manylinux x86-64")
    return problems


def tree_bytes(root: Path = ROOT) -> int:
    """What the device tool sends besides the wheels: tracked and untracked-not-ignored files."""
    names = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True).stdout.split(b"\0")
    return sum((root / n.decode()).stat().st_size for n in names if n and (root / n.decode()).is_file())


def stand_in(dest: Path, name: str, version: str) -> None:
    """A metadata-only wheel: the device's installed package, for an offline resolution here."""
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(dest / f"{dist}-py3-none-any.whl", "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: prepare_wheels\nRoot-Is-Purelib: "
                                              "true\nTag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")


def resolves_offline(dest: Path, have: dict[str, str | None], resolved: list[dict[str, str]],
                     extras: list[str]) -> str | None:
    """None when `pip install trainbench` for Python 3.12 resolves from the wheels plus stand-ins for what the
    device holds (at its version, else at the one resolved here), with no index; else pip's complaint."""
    carried = {canonical(w.name.split("-")[0]) for w in dest.glob("*.whl")}
    picked = {r["name"]: r["version"] for r in resolved}
    with tempfile.TemporaryDirectory() as tmp:
        for name, version in have.items():
            if canonical(name) not in carried and (version or canonical(name) in picked):
                stand_in(Path(tmp), canonical(name), version or picked[canonical(name)])
        done = pip("install", "--dry-run", "--quiet", "--no-index", "--find-links", str(dest), "--find-links", tmp,
                   *TARGET, "--target", str(Path(tmp) / "t"), f"trainbench-suite[{','.join(extras)}]" if extras else
                   "trainbench-suite")
    return None if done.returncode == 0 else done.stderr.strip()


def read_freeze(path: Path) -> dict[str, str | None]:
    have: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            have[canonical(name)] = version.split("+")[0]
    return have


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dest", type=Path, default=ROOT / WHEEL_DIR, help="the wheel folder (default: .whl)")
    ap.add_argument("--have-freeze", type=Path, default=None,
                    help="`python3 -m pip freeze` taken on the device: what it already holds (default: DEVICE_HAS)")
    ap.add_argument("--extra", action="append", default=None, metavar="NAME",
                    help=f"a pyproject extra to carry too (repeatable; default: {' '.join(EXTRAS)})")
    args = ap.parse_args(argv)
    extras = EXTRAS if args.extra is None else args.extra
    have: dict[str, str | None] = read_freeze(args.have_freeze) if args.have_freeze else dict(DEVICE_HAS)
    args.dest.mkdir(parents=True, exist_ok=True)
    resolved = resolve(runtime_requirements(extras))
    download(select(resolved, have), args.dest)
    own = build_own_wheel(args.dest)
    wheels = sorted(args.dest.glob("*.whl"))
    wheel_bytes, tree = sum(w.stat().st_size for w in wheels), tree_bytes()
    for w in wheels:
        print(f"{w.stat().st_size / 2**20:7.2f} MiB  {w.name}")
    print(f"wheels {wheel_bytes / 2**20:.1f} MiB + working tree {tree / 2**20:.1f} MiB = "
          f"{(wheel_bytes + tree) / 2**20:.1f} MiB of {LIMIT_BYTES / 2**20:.0f} MiB; trainbench: {own.name}")
    problems = wheel_problems(args.dest)
    if wheel_bytes + tree > LIMIT_BYTES:
        problems.append(f"wheels + tree are {(wheel_bytes + tree) / 2**20:.1f} MiB, over the device's "
                        f"{LIMIT_BYTES / 2**20:.0f} MiB: empty {args.dest} of old wheels, carry fewer --extra, or "
                        "name what the device holds (--have-freeze)")
    if (why := resolves_offline(args.dest, have, resolved, extras)) is not None:
        problems.append(f"`pip install trainbench` does not resolve offline for Python {PYTHON}:\n{why}")
    for p in problems:
        print(f"prepare_wheels: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"on the device, from the repository root (carry {WHEEL_DIR}):\n  {device_command(extras)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

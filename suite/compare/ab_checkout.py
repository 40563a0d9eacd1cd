"""Each side of an A/B made ready to run: its commit checked out in a worktree of its own, and a venv that runs
that checkout's code (pip installed, or this interpreter's packages underneath: `--deps`, `--offline`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from suite.compare.ab_plan import ABError, ABPlan, Side


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise ABError(f"git {' '.join(args)} (in {repo}) failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def resolve(repo: Path, ref: str, flag: str) -> str:
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except ABError:
        raise ABError(f"{flag} {ref!r}: not a commit in {repo} (fetch it first, e.g. `git fetch origin {ref}`)") from None


def _worktree(repo: Path, sha: str, dest: Path) -> None:
    if dest.exists():
        try:
            top = Path(_git(dest, "rev-parse", "--show-toplevel")).resolve()
        except ABError:
            top = None
        if top != dest.resolve():  # e.g. --out inside the repository: dest is one of its folders, not a worktree
            raise ABError(f"{dest} exists and is not a worktree that `trainbench ab` made"
                          f"{f' (it lies inside {top})' if top else ''}; give --out a folder of its own")
        if _git(dest, "rev-parse", "HEAD") == sha:
            return  # prepared before (a rerun): reuse
        _git(repo, "worktree", "remove", "--force", str(dest))
    dest.parent.mkdir(parents=True, exist_ok=True)
    _git(repo, "worktree", "prune")  # a worktree folder deleted by hand stays registered until pruned
    _git(repo, "worktree", "add", "--force", "--detach", str(dest), sha)


def _site_dirs(python: Path) -> list[str]:
    """purelib and platlib of an interpreter (one folder in a Linux venv), in that order, no repeats."""
    code = "import sysconfig; p = sysconfig.get_paths(); print(p['purelib']); print(p['platlib'])"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    return list(dict.fromkeys(out.split()))


def _underlay(python: Path, first: Sequence[str]) -> None:
    """A .pth in the venv's own site folder: `first` (if any), then this interpreter's site folders, AFTER the
    venv's own packages. A path line in a .pth is only appended to sys.path (the underlay's own .pth files, e.g.
    this checkout's editable install, are not run), so the side's own code is what it imports."""
    site = Path(_site_dirs(python)[0])
    (site / "_trainbench_ab.pth").write_text("".join(f"{p}\n" for p in [*first, *_site_dirs(Path(sys.executable))]))


def _venv(src: Path, env: Path, plan: ABPlan, log: Callable[[str], None]) -> Path:
    """One venv per side. `install`: pip installs the side's project and its declared dependencies (its own
    constraints file, one shared pip cache); with `offline` pip reaches no index: the venv sees this interpreter's
    installed packages underneath its own, so they satisfy what they can, and `find_links` folders supply the
    rest (a requirement nothing local satisfies fails, with pip's message). `shared`: no pip, this interpreter's
    packages with the side's code first (both sides then differ only in code)."""
    python = env / "bin" / "python"
    own_pip = plan.deps == "install" and not plan.offline  # offline: the underlay's pip and setuptools build it
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--upgrade-deps" if own_pip else "--without-pip", str(env)],
                       check=True, capture_output=True, timeout=600)
    if plan.deps == "shared":
        _underlay(python, [str(src)])  # the side's code first, then this interpreter's packages (installed once)
        return python
    if plan.offline:
        _underlay(python, [])
        if importlib.util.find_spec("pip") is None:
            raise ABError(f"--offline: {sys.executable} has no pip to install the sides with; install pip into it, "
                          "or use --deps shared")
    constraints = src / "constraints" / "dev.txt"
    target = f"{src}[{plan.extras}]" if plan.extras else str(src)
    cmd = [str(python), "-m", "pip", "install", "--quiet"]
    if plan.offline:  # the build backend (setuptools) comes from the underlay: an isolated build would fetch it
        cmd += ["--no-index", "--no-build-isolation"]
    for folder in plan.find_links:
        cmd += ["--find-links", str(Path(folder).resolve())]
    if constraints.exists():
        cmd += ["-c", str(constraints)]
    cmd += ["-e", target]
    env_vars = {**os.environ, "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(plan.out / "pip-cache"))}
    env_vars.pop("PYTHONPATH", None)  # pip must see the side's venv, not the caller's checkout
    log(f"installing {src.name}: {' '.join(cmd)}")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env_vars, timeout=3600)
    if done.returncode != 0:
        hint = (" (--offline: every requirement must be installed here already or be a wheel in a --find-links "
                "folder)") if plan.offline else ""
        raise ABError(f"installing {src} failed{hint}:\n{done.stderr[-3000:]}")
    return python


def prepare(plan: ABPlan, base: str, head: str, log: Callable[[str], None]) -> list[Side]:
    if plan.deps not in ("install", "shared"):
        raise ABError(f"--deps {plan.deps!r}: expected install or shared")
    if plan.deps == "shared" and (plan.offline or plan.find_links):
        raise ABError("--offline and --find-links are for --deps install (--deps shared installs nothing)")
    for folder in plan.find_links:
        if not Path(folder).is_dir():
            raise ABError(f"--find-links {folder}: no such folder (a folder of wheels, e.g. from `pip wheel -w DIR`)")
    shas = {"base": resolve(plan.repo, base, "--base"), "head": resolve(plan.repo, head, "--head")}
    sides = []
    for name, ref in (("base", base), ("head", head)):
        src = (plan.out / "src" / name).resolve()
        env = (plan.out / "env" / name).resolve()
        if plan.cache is not None:
            src, env = (plan.cache / shas[name][:12] / "src").resolve(), (plan.cache / shas[name][:12] / "env").resolve()
        try:
            _worktree(plan.repo, shas[name], src)
            python = _venv(src, env, plan, log)
        except ABError as e:
            raise ABError(str(e), side=name) from None
        sides.append(Side(name, ref, shas[name], src, python))
    return sides

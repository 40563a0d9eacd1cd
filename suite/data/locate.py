"""Where a data set lives on this machine, and the error that says how to get it when it is not there."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path

from suite.data.base import DataMissing


def glob_in(folder: str | Path, pattern: str) -> list[Path]:
    """The files in `folder` that `pattern` matches, sorted. The folder is taken as written: a data.path with glob
    characters (`we[ir]d`) is a name, not a pattern (issue 50 item 12)."""
    folder = Path(folder).expanduser()
    return sorted(folder / p for p in glob.glob(pattern, root_dir=folder))


def data_root() -> Path:
    """Where data sets live on this machine: $TRAINBENCH_DATA, else ~/.cache/trainbench (the one definition)."""
    return Path(os.environ.get("TRAINBENCH_DATA", Path.home() / ".cache" / "trainbench")).expanduser()


def registry_dir(package: str) -> Path:
    """Where scripts/install_data.sh unpacks a registry package (Debian .deb or PyPI wheel)."""
    return data_root() / "registry" / package


def find_dir(name: str, candidates: Iterable[Path | None], required: Iterable[str], how: str) -> Path:
    """The first candidate folder that holds every required file; else DataMissing naming `how` to get it."""
    tried: list[str] = []
    required = list(required)
    for cand in candidates:
        if cand is None:
            continue
        cand = Path(cand).expanduser()
        tried.append(str(cand))
        if all((cand / r).exists() for r in required):
            return cand
    raise DataMissing(
        f"data set {name!r} not found (looked in: {', '.join(tried) or 'nowhere'}; "
        f"need {', '.join(required)}). To get it: {how}"
    )


def install_hint(name: str) -> str:
    return f"run `make data` (or `trainbench data prepare {name}`), or set TRAINBENCH_DATA to where it lives"


def local_hint(name: str) -> str:
    return (f"run `trainbench data prepare {name} --from PATH` with a local copy (or without --from where a "
            "network exists), or give data.path in the spec; to try the recipe without it, "
            f"`trainbench data prepare {name} --synthetic` writes a small stand-in (runs on it are marked synthetic)")


def named_dir(name: str) -> Path:
    """$TRAINBENCH_DATA/<name>: where `trainbench data prepare NAME --from PATH` links a local copy."""
    return data_root() / name


def link_local(name: str, source: Path) -> Path:
    """Point $TRAINBENCH_DATA/<name> at a checked local copy (a symlink: ImageNet is not copied)."""
    source = Path(source).expanduser().resolve()
    dest = named_dir(name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_symlink() or dest.exists():
        if dest.resolve() == source:
            return dest
        if not dest.is_symlink() and (dest / "TRAINBENCH_SYNTHETIC.json").is_file():
            import shutil  # a synthetic stand-in (suite/data/synthetic/files.py's MARKER) gives way to the real copy

            shutil.rmtree(dest)
        elif not dest.is_symlink():
            raise FileExistsError(f"{dest} exists and is not a link; move it away or set TRAINBENCH_DATA")
        else:
            dest.unlink()
    dest.symlink_to(source, target_is_directory=True)
    return dest

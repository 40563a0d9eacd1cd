"""The site's output folder: kept apart from its inputs, built into a staging folder and swapped in, and
pruned only of files the previous build listed in its manifest (never a file the site did not write)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from suite.site.pages import MARKER  # a folder holding this file is ours to replace; the file is the manifest


class SiteError(Exception):
    """The site cannot be built; the message says which input or folder and what to do."""


def check_out_apart(out: Path, inputs: dict[str, Path | None]) -> None:
    """Refuse an --out that is, holds or sits inside an input folder (after resolving symlinks).

    A site inside results/ is read back as results on the next build (2 -> 4 -> 6 runs); results inside the
    site's folder would be pruned as stale pages. Either way the user's data is at stake.
    """
    o = out.resolve()
    for flag, folder in inputs.items():
        if folder is None or not folder.exists():
            continue
        f = folder.resolve()
        if f.is_file() and o not in f.parents:
            continue  # one input file: only a site folder around it would be a problem
        if o == f or f in o.parents or o in f.parents:
            where = "is" if o == f else ("is inside" if f in o.parents else "holds")
            raise SiteError(f"--out {out} {where} {flag} {folder}: the site must be built in a folder of its "
                            f"own (e.g. --out site/_build), apart from its inputs")


def previous_files(out: Path) -> set[str]:
    """The files the previous build wrote, from its manifest; none when there is no manifest listing them."""
    try:
        data = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return set()
    files = data.get("files") if isinstance(data, dict) else None
    return {f for f in files if isinstance(f, str)} if isinstance(files, list) else set()


def prune(out: Path, written: set[str], previous: set[str]) -> None:
    """Delete what the previous build wrote (per its manifest) and this one did not: a result removed, a
    compare file dropped. A file the site did not write itself is never deleted."""
    root = out.resolve()
    for rel in sorted(previous - written - {MARKER}):
        path = (root / rel).resolve()
        if root in path.parents and path.is_file():
            path.unlink()


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """Build into a sibling folder seeded with hard links to the current site, then swap it into place.

    A build that fails leaves the previous site as it was. The seed keeps rebuilds incremental (unchanged
    pages are kept, not rewritten); writers unlink before writing, so the old site's files never change.
    """
    final = out.resolve()
    final.parent.mkdir(parents=True, exist_ok=True)
    _clear_stale_stages(final)
    stage = final.parent / f".{final.name}.staging-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    if final.is_dir():
        shutil.copytree(final, stage, symlinks=True, copy_function=_link_or_copy)
    else:
        stage.mkdir()
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    old = final.parent / f".{final.name}.old-{os.getpid()}"
    if final.exists():
        os.rename(final, old)
    os.rename(stage, final)
    shutil.rmtree(old, ignore_errors=True)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _clear_stale_stages(final: Path) -> None:
    """Remove the staging and old folders of builds that were killed (their process is gone)."""
    for p in final.parent.glob(f".{final.name}.*-*"):
        kind, _, pid = p.name.rpartition("-")
        if not (kind.endswith((".staging", ".old")) and pid.isdigit()) or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass
